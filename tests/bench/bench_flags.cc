#include "tests/bench/bench_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(double, seconds, downpour::BenchFlags{}.seconds,
          "Timed seconds of a fixed-time benchmark.");
ABSL_FLAG(int, warmup_steps, downpour::BenchFlags{}.warmup_steps,
          "Untimed steps before each measurement (caches, clocks, cuDNN's "
          "algorithm choice).");
ABSL_FLAG(int, min_steps, downpour::BenchFlags{}.min_steps,
          "Fewest timed steps per measurement (>= 1).");
ABSL_FLAG(double, min_seconds, downpour::BenchFlags{}.min_seconds,
          "Least timed seconds per measurement.");
ABSL_FLAG(std::string, batch_sizes,
          absl::StrJoin(downpour::BenchFlags{}.batch_sizes, ","),
          "Comma-separated batch sizes to measure.");

namespace downpour {
namespace {

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

}  // namespace

absl::StatusOr<BenchFlags> BenchFlagsFromFlags() {
  BenchFlags f;
  f.seconds = absl::GetFlag(FLAGS_seconds);
  f.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  f.min_steps = absl::GetFlag(FLAGS_min_steps);
  f.min_seconds = absl::GetFlag(FLAGS_min_seconds);
  if (!FiniteNonNegative(f.seconds) || !FiniteNonNegative(f.min_seconds)) {
    return absl::InvalidArgumentError(
        "--seconds and --min_seconds must be finite numbers >= 0");
  }
  if (f.warmup_steps < 0 || f.min_steps < 1) {
    return absl::InvalidArgumentError(
        "need --warmup_steps >= 0 and --min_steps >= 1");
  }
  f.batch_sizes.clear();
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes),
                                            ',', absl::SkipEmpty())) {
    int b = 0;
    if (!absl::SimpleAtoi(s, &b) || b < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batch_sizes: '", s, "' is not a positive integer"));
    }
    f.batch_sizes.push_back(b);
  }
  if (f.batch_sizes.empty()) {
    return absl::InvalidArgumentError("--batch_sizes is empty");
  }
  return f;
}

}  // namespace downpour
