#include "common/sandblaster_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flag_args.h"
#include "common/vector_program.h"

ABSL_FLAG(int, lbfgs_history, downpour::SandblasterOptions{}.lbfgs_history,
          "--mode=sandblaster: the (s, y) pairs of L-BFGS the shards keep "
          "(m), in [1, 64].");
ABSL_FLAG(int64_t, sandblaster_batch, downpour::SandblasterOptions{}.batch,
          "--mode=sandblaster: examples of one iteration's gradient and of "
          "its line search's trial points (at least --portion_examples; the "
          "training set's size or more: full-batch L-BFGS).");
ABSL_FLAG(int64_t, portion_examples,
          downpour::SandblasterOptions{}.portion_examples,
          "--mode=sandblaster: examples of one work portion the chief hands "
          "to a worker (>= 1).");

namespace downpour {

absl::StatusOr<SandblasterOptions> SandblasterOptionsFromFlags() {
  SandblasterOptions o;
  o.lbfgs_history = absl::GetFlag(FLAGS_lbfgs_history);
  o.batch = absl::GetFlag(FLAGS_sandblaster_batch);
  o.portion_examples = absl::GetFlag(FLAGS_portion_examples);
  if (o.lbfgs_history < 1 || o.lbfgs_history > kMaxHistorySlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lbfgs_history must be in [1, ", kMaxHistorySlots, "], got ",
        o.lbfgs_history));
  }
  if (o.portion_examples < 1 || o.portion_examples > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--portion_examples must be in [1, 2^30], got ", o.portion_examples));
  }
  if (o.batch < o.portion_examples || o.batch > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sandblaster_batch must be at least --portion_examples (",
        o.portion_examples, "), got ", o.batch));
  }
  return o;
}

std::vector<std::string> GivenSandblasterFlagArgs() {
  return GivenFlagArgs({"lbfgs_history", "sandblaster_batch",
                        "portion_examples"});
}

}  // namespace downpour
