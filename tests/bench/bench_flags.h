// File: tests/bench/bench_flags.h
//
// The benchmark-only flags that several benchmark mains take, defined once:
// how long and how often to measure (--seconds, --warmup_steps, --min_steps,
// --min_seconds) and which batch sizes (--batch_sizes). Flags that mean what
// a worker's or server's flag means come from those libraries instead
// (worker/backend_flags.h, worker/transport_flags.h, ...). Only a main calls
// BenchFlagsFromFlags.
//
//   absl::ParseCommandLine(argc, argv);
//   absl::StatusOr<BenchFlags> f = BenchFlagsFromFlags();
//   if (!f.ok()) { /* print f.status().message(), exit 2 */ }
#ifndef DOWNPOUR_TESTS_BENCH_BENCH_FLAGS_H_
#define DOWNPOUR_TESTS_BENCH_BENCH_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

// The values of the benchmark flags, checked; the defaults are the flags'.
struct BenchFlags {
  // Timed seconds of a benchmark that runs for a fixed time
  // (net_exchange_bench, load_client).
  double seconds = 10;
  // Step benchmarks (compute_bench): per measurement, untimed steps first,
  // then at least min_steps timed steps and at least min_seconds.
  int warmup_steps = 20;
  int min_steps = 10;
  double min_seconds = 2.0;
  std::vector<int> batch_sizes = {64, 256, 1024};
};

// InvalidArgument naming the flag for a bad value: --seconds or
// --min_seconds negative or not finite, --warmup_steps < 0, --min_steps < 1,
// --batch_sizes empty or not comma-separated positive integers.
absl::StatusOr<BenchFlags> BenchFlagsFromFlags();

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_BENCH_FLAGS_H_
