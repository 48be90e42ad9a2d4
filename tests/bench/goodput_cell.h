// File: tests/bench/goodput_cell.h
//
// transport_bench's gRPC measurements: a goodput cell (S in-process shards on
// real gRPC servers over loopback TCP, W worker threads each with its own
// NewGrpcParameterClient, rounds of push + pull on a one-tensor model) and
// the latency of small (4 KB) pulls and pushes.
//
//   GoodputCell c = RunGoodputCell(options, 64 * kMiB, /*shards=*/2,
//                                  /*workers=*/1);
//   if (c.refused.empty()) std::printf("%.2f GB/s\n", GBps(c.goodput));
//
// Each call starts and stops its own cluster; not thread-safe (it measures
// the whole process's CPU use).
#ifndef DOWNPOUR_TESTS_BENCH_GOODPUT_CELL_H_
#define DOWNPOUR_TESTS_BENCH_GOODPUT_CELL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/bench/inprocess_cluster.h"
#include "tests/bench/transport_bench_util.h"

namespace downpour {
namespace transport_bench {

struct GoodputCell {
  int64_t model_bytes = 0;
  int shards = 0;
  int workers = 0;
  int rounds = 0;
  std::string refused;  // Non-empty: why there is no number.
  double seconds = 0;
  double goodput = 0;         // Bytes pushed + pulled per second, all workers.
  std::vector<double> trial_goodput;  // The same, per trial.
  double pull_mean_s = 0;     // One worker's Pull, mean over rounds and workers.
  double push_mean_s = 0;     // Push, or the whole PushPull with --push_pull.
  // Whole process (clients, servers, gRPC threads) during the timed rounds.
  double cpu_s_per_gb = 0;    // User + system CPU seconds per GB moved.
  double sys_fraction = 0;    // Share of that CPU time spent in the kernel.
  double faults_per_mb = 0;   // Minor page faults per MiB moved.
};

// Runs `trials` timed trials of cell.rounds rounds each on one cluster;
// `between_trials` (if set) runs before each trial while the workers wait, so
// another measurement can be interleaved with this cell's. `on_cluster` (if
// set; used by the snapshot cost mode) is called with the cluster once its
// stores are declared and warm, and with nullptr before the cluster shuts
// down.
GoodputCell RunGoodputCell(const BenchOptions& o, int64_t model_bytes,
                           int shards, int workers, int trials = 1,
                           const std::function<void()>& between_trials = {},
                           const std::function<void(InProcessCluster*)>& on_cluster = {});

struct LatencyResult {
  std::string error;
  int ops = 0;
  double pull_p50_us = 0, pull_p99_us = 0, pull_mean_us = 0;
  double push_p50_us = 0, push_p99_us = 0;
};

// o.latency_ops timed 4 KB pulls and pushes (1024 floats, 1 shard, 1 worker)
// after 50 untimed ones.
LatencyResult RunSmallLatency(const BenchOptions& o);

}  // namespace transport_bench
}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_GOODPUT_CELL_H_
