// File: common/sandblaster_flags.h
//
// The flags of --mode=sandblaster, defined once for ps_worker, launch and
// node (which pass them on): the L-BFGS history m, the examples of one
// iteration's gradient and the examples of one work portion. Their
// defaults come from SandblasterOptions{} (chosen from the measurements in
// docs/results.md, "Sandblaster L-BFGS"). Only a main calls these.
//
//   DP_ASSIGN_OR_RETURN(SandblasterOptions s, SandblasterOptionsFromFlags());
#ifndef DOWNPOUR_COMMON_SANDBLASTER_FLAGS_H_
#define DOWNPOUR_COMMON_SANDBLASTER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

struct SandblasterOptions {
  // (s, y) pairs the shards keep: --lbfgs_history, in [1, 64].
  int lbfgs_history = 10;
  // Examples of one iteration's gradient (and of its line search's trial
  // points): --sandblaster_batch; at least --portion_examples. A batch of
  // the whole training set makes the method deterministic full-batch
  // L-BFGS.
  int64_t batch = 6000;
  // Examples of one work portion: --portion_examples (>= 1).
  int64_t portion_examples = 250;
  // Iterations that share one batch (no flag): the gradient at an accepted
  // trial point is then also the next iteration's, so an iteration costs
  // one evaluation instead of two while its batch lasts, and each (s, y)
  // pair is taken on one batch.
  int iterations_per_batch = 5;
};

// The flags, checked: InvalidArgument naming the flag for a bad value.
absl::StatusOr<SandblasterOptions> SandblasterOptionsFromFlags();

// The Sandblaster flags given on the command line, as "--name=value"
// arguments to pass on to the workers.
std::vector<std::string> GivenSandblasterFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SANDBLASTER_FLAGS_H_
