// File: worker/nn/conv_algo_choice.h
//
// The choice of a cuDNN convolution algorithm, as pure functions over
// cuDNN's heuristic ranking: no cuDNN header and no GPU are needed, so the
// rules are unit-tested on any machine (cudnn_conv_algos.cc turns the
// cudnnConvolution*AlgoPerf_t entries into RankedAlgo values and wraps the
// cudnnGet*WorkspaceSize query as `workspace_size`; cuda_backend.cc runs
// the convolutions through RunWithAlgoRetry).
//
// The choice rule (ChooseConvAlgo): the first ranked algorithm (best first)
//  * whose entry has status success,
//  * whose entry's mathType is CUDNN_FMA_MATH unless TF32 is allowed (an
//    entry ranked for tensor-op math was measured for kernels the FMA-math
//    descriptor forbids, so its rank says nothing about the FMA kernel),
//  * that `allow_transform` permits (FFT and Winograd change the rounding),
//  * that is not marked bad (it failed to run earlier),
//  * and whose workspace fits the limit;
// with `deterministic`, deterministic algorithms are preferred over faster
// non-deterministic ones (which sum in an order that varies between runs,
// e.g. backward-filter ALGO_0's atomics); `fallbacks` are tried, in order,
// when the ranking offers nothing.
//
// The retry rule (RunWithAlgoRetry), after PyTorch's Conv_v7.cpp: when the
// chosen algorithm fails to run with NOT_SUPPORTED (Unimplemented) or out of
// memory (ResourceExhausted), it is marked bad for that shape and the next
// choice runs, until one succeeds or none is left.
//
// Usage:
//   ConvAlgoRules rules;  rules.workspace_limit = 256 << 20;
//   AlgoSlot slot;        // one per shape and direction, kept across calls
//   DP_RETURN_IF_ERROR(RunWithAlgoRetry(&slot,
//       [&](const std::set<int>& bad) {
//         return ChooseConvAlgo(ranking, fallbacks, rules, bad,
//                               is_transform, workspace_size); },
//       [&](const ConvAlgoChoice& c) { return RunConvolution(c); }, log));
//
// Thread-safety: pure functions; the callbacks run on the calling thread.
// An AlgoSlot is used by one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_
#define DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

// One entry of cuDNN's ranking (cudnnConvolution*AlgoPerf_t), algorithm and
// math type as their enum values.
struct RankedAlgo {
  int algo = 0;
  bool ok = false;             // status == CUDNN_STATUS_SUCCESS
  bool deterministic = false;  // determinism == CUDNN_DETERMINISTIC
  bool fma_math = true;        // mathType == CUDNN_FMA_MATH
  int math_type = 0;           // the entry's cudnnMathType_t
};

struct ConvAlgoChoice {
  int algo = 0;
  size_t workspace = 0;  // Bytes, as the workspace query reported.
  // The math type to run it with: the ranking entry's, or
  // ConvAlgoRules::fallback_math_type for a fallback.
  int math_type = 0;
};

struct ConvAlgoRules {
  bool allow_transform = false;  // FFT and Winograd algorithms too.
  bool allow_tf32 = false;       // Entries of any math type, not only FMA.
  bool deterministic = false;    // Deterministic algorithms first.
  size_t workspace_limit = 0;    // Bytes.
  int fallback_math_type = 0;    // CUDNN_FMA_MATH's value, for fallbacks.
};

// `is_transform(algo)`: an FFT or Winograd algorithm. `workspace_size(algo,
// &bytes)`: false when the algorithm cannot run this convolution (the query
// failed), else its workspace in `bytes`. `bad`: algorithms that failed to
// run before, never chosen again. Unimplemented when nothing is usable.
absl::StatusOr<ConvAlgoChoice> ChooseConvAlgo(
    const std::vector<RankedAlgo>& ranking, const std::vector<int>& fallbacks,
    const ConvAlgoRules& rules, const std::set<int>& bad,
    const std::function<bool(int)>& is_transform,
    const std::function<bool(int, size_t*)>& workspace_size);

// Whether an error from running an algorithm may not recur with another
// one: Unimplemented (cuDNN's NOT_SUPPORTED family) and ResourceExhausted
// (out of memory, the workspace's included).
bool IsAlgoRetryable(const absl::Status& s);

// The algorithm state of one convolution shape and direction.
struct AlgoSlot {
  bool chosen = false;
  ConvAlgoChoice choice;
  std::set<int> bad;  // Algorithms that failed to run; never tried again.
};

// Runs `run` with the slot's algorithm, choosing one with `choose(bad)`
// first when none is chosen. On a retryable failure (IsAlgoRetryable) the
// algorithm is marked bad, `log` (may be null) is told why, and the next
// choice runs. Returns the first non-retryable error, or, when `choose`
// finds nothing more, an error of the last run's code naming every
// algorithm that failed and why.
absl::Status RunWithAlgoRetry(
    AlgoSlot* slot,
    const std::function<absl::StatusOr<ConvAlgoChoice>(const std::set<int>&)>&
        choose,
    const std::function<absl::Status(const ConvAlgoChoice&)>& run,
    const std::function<void(const std::string&)>& log);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_
