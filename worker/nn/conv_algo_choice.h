// File: worker/nn/conv_algo_choice.h
//
// The choice of a cuDNN convolution algorithm, as a pure function over
// cuDNN's heuristic ranking: no cuDNN header and no GPU are needed, so the
// rule is unit-tested on any machine (cuda_backend.cc turns the
// cudnnConvolution*AlgoPerf_t entries into RankedAlgo values and wraps the
// cudnnGet*WorkspaceSize query as `workspace_size`).
//
// The rule: the first ranked algorithm (best first) whose entry has status
// success, that `allow_transform` permits (FFT and Winograd change the
// rounding), and whose workspace fits `limit`; deterministic algorithms are
// preferred over faster non-deterministic ones; `fallbacks` are tried, in
// order, when the ranking offers nothing usable.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(ConvAlgoChoice c, ChooseConvAlgo(ranking, fallbacks,
//       /*allow_transform=*/false, limit, is_transform, workspace_size));
//
// Thread-safety: a pure function; the callbacks run on the calling thread.
#ifndef DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_
#define DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

// One entry of cuDNN's ranking (cudnnConvolution*AlgoPerf_t), algorithm as
// its enum value.
struct RankedAlgo {
  int algo = 0;
  bool ok = false;             // status == CUDNN_STATUS_SUCCESS
  bool deterministic = false;  // determinism == CUDNN_DETERMINISTIC
};

struct ConvAlgoChoice {
  int algo = 0;
  size_t workspace = 0;  // Bytes, as the workspace query reported.
};

// `is_transform(algo)`: an FFT or Winograd algorithm. `workspace_size(algo,
// &bytes)`: false when the algorithm cannot run this convolution (the query
// failed), else its workspace in `bytes`. Unimplemented when nothing fits.
absl::StatusOr<ConvAlgoChoice> ChooseConvAlgo(
    const std::vector<RankedAlgo>& ranking, const std::vector<int>& fallbacks,
    bool allow_transform, size_t limit,
    const std::function<bool(int)>& is_transform,
    const std::function<bool(int, size_t*)>& workspace_size);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CONV_ALGO_CHOICE_H_
