// File: tests/bench/apply_stages.h
//
// transport_bench's in-process measurements, no network: (c) the server's
// apply rate (ParameterStore::Push, and Optimizer::Apply alone) against
// memcpy of the same bytes, and (d) each user-space stage a 64 MB push and
// pull goes through (parse, apply, pull references, the client's gather),
// timed alone.
//
//   const double memcpy_bps = MeasureMemcpy(64 * kMiB, 10);
//   ApplyResult a = MeasureApply("sgd", 64 * kMiB, 10);
//   // a.store_push / memcpy_bps: the apply path's share of memory bandwidth.
//
// Thread-compatible.
#ifndef DOWNPOUR_TESTS_BENCH_APPLY_STAGES_H_
#define DOWNPOUR_TESTS_BENCH_APPLY_STAGES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace downpour {
namespace transport_bench {

// memcpy of `bytes`, bytes per second (median of `rounds`).
double MeasureMemcpy(int64_t bytes, int rounds);

struct ApplyResult {
  std::string optimizer;
  std::string error;
  double store_push = 0;      // Gradient bytes/s through ParameterStore::Push.
  double optimizer_only = 0;  // Gradient bytes/s through Optimizer::Apply.
};

// Optimizer `name` ("sgd", "momentum", "adagrad") on a `bytes` gradient.
ApplyResult MeasureApply(const std::string& name, int64_t bytes, int rounds);

struct Stage {
  std::string name;
  double bytes_per_second = 0;
  double seconds = 0;
};

// Each stage of one shard's 64 MB push and pull that happens in user space,
// timed alone (median), in the order the bytes go through them.
// The client's gather is timed with both kinds of stores; the kind a client
// with `streaming_pull_min_bytes` uses at this size counts in the sums, the
// other is shown for comparison. Stage names start with "push" or "pull"
// where they count in that direction's sum.
std::vector<Stage> MeasureCopyStages(int64_t bytes, int rounds,
                                     int64_t streaming_pull_min_bytes,
                                     std::string* error);

}  // namespace transport_bench
}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_APPLY_STAGES_H_
