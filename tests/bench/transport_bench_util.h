// File: tests/bench/transport_bench_util.h
//
// transport_bench's settings (BenchOptions, built from the flags in
// transport_bench_main.cc) and the small helpers its sections share: clocks,
// units, percentiles, process CPU usage, the one-tensor model layout.
//
//   const double s = MedianSeconds(rounds, [&] { DoTheThing(); });
//   std::printf("%.2f GB/s\n", GBps(bytes / s));
//
// Thread-compatible; GetUsage reads the whole process's counters.
#ifndef DOWNPOUR_TESTS_BENCH_TRANSPORT_BENCH_UTIL_H_
#define DOWNPOUR_TESTS_BENCH_TRANSPORT_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/sharding.h"
#include "rpc/credentials.h"
#include "rpc/wire.h"
#include "server/optimizer.h"

namespace downpour {
namespace transport_bench {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMiB = int64_t{1} << 20;

// The benchmark's settings, built from the flags in main.
struct BenchOptions {
  std::vector<int64_t> sizes_mb;
  std::vector<int> shards;
  std::vector<int> workers;
  int64_t cell_bytes = 0;
  int min_rounds = 2;
  int max_rounds = 50;
  int64_t max_chunk_bytes = kMiB;
  int64_t part_bytes = 0;
  int connections_per_shard = 0;
  int calls_in_flight = 0;
  bool push_pull = true;
  int64_t streaming_pull_min_bytes = 32 * kMiB;
  wire::Encoding push_encoding = wire::Encoding::kRawF32;
  wire::Encoding pull_encoding = wire::Encoding::kRawF32;
  // Payloads through the workers' shared memory: --shared_memory, which
  // main reads (worker/transport_flags.h).
  bool shared_memory = true;
  // And the pushes as calls through it: --shared_memory_calls.
  bool shared_memory_calls = true;
  bool separate_connections = true;
  int latency_ops = 0;
  int64_t tcp_bytes = 0;
  int64_t tcp_write_bytes = 4 * kMiB;
  int64_t apply_bytes = 64 * kMiB;
  int apply_rounds = 0;
  int headline_trials = 5;
  int64_t headline_bytes = 512 * kMiB;
  bool quick = false;  // Only reported.
  TransportSecurityOptions security;  // Of clients and servers.
};

// CPU time (all threads) and minor page faults of this process so far.
struct Usage {
  double user_s = 0;
  double sys_s = 0;
  int64_t minor_faults = 0;
};
Usage GetUsage();

double SecondsSince(Clock::time_point t);

inline double Gbps(double bytes_per_second) {
  return bytes_per_second * 8 / 1e9;
}
inline double GBps(double bytes_per_second) { return bytes_per_second / 1e9; }

// The element at rank p * size of the sorted values; 0 when empty.
double Percentile(std::vector<double> v, double p);
double Median(std::vector<double> v);

// "4.81, 3.95, ..." in GB/s.
std::string JoinGBps(const std::vector<double>& bytes_per_second);

// "0.52 0.61 0.70" (1/5/15 min), or "unknown".
std::string LoadAverage();

// A model of one tensor "w" of `floats` floats.
ModelLayout OneTensorLayout(int64_t floats, int shards, int64_t max_chunk_bytes);

// SGD at a tiny rate: with zero gradients the values stay fixed.
OptimizerOptions TinySgd();

// Median seconds of `rounds` runs of fn() after one untimed run.
template <typename Fn>
double MedianSeconds(int rounds, Fn fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const Clock::time_point start = Clock::now();
    fn();
    t.push_back(SecondsSince(start));
  }
  return Median(t);
}

}  // namespace transport_bench
}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_TRANSPORT_BENCH_UTIL_H_
