// File: common/train_mode.h
//
// The one definition of a job's consistency mode, shared by the servers, the
// workers and the launcher: what a flag `--mode=` may say and how each binary
// prints it. Parse it once in `main` and pass the enum down.
//
//   DP_ASSIGN_OR_RETURN(TrainMode mode, ParseTrainMode(flag_value));
//   std::cout << TrainModeName(mode);  // "async", "sync", ...
#ifndef DOWNPOUR_COMMON_TRAIN_MODE_H_
#define DOWNPOUR_COMMON_TRAIN_MODE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

enum class TrainMode {
  // Downpour: every push is applied on arrival.
  kAsync,
  // Each step's update is the mean of the workers' gradients for that step.
  kSync,
  // Stale-synchronous parallel: pushes apply on arrival, a worker may run at
  // most `staleness` clocks ahead of the slowest one.
  kSsp,
  // Sandblaster L-BFGS (server/lbfgs_shard.h, worker/sandblaster_loop.h): a
  // batch optimizer whose vector arithmetic runs on the shards, driven by a
  // coordinator in the chief that hands out work portions.
  kSandblaster,
};

// "async", "sync", "ssp" or "sandblaster"; anything else is InvalidArgument naming the known
// modes.
absl::StatusOr<TrainMode> ParseTrainMode(absl::string_view name);

// The name ParseTrainMode accepts for `mode`.
const char* TrainModeName(TrainMode mode);

// TrainMode as a flag type (--mode): an unknown name is refused while the
// command line is parsed.
bool AbslParseFlag(absl::string_view text, TrainMode* mode, std::string* error);
std::string AbslUnparseFlag(TrainMode mode);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_TRAIN_MODE_H_
