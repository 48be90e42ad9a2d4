// File: tests/bench/snapshot_cost.h
//
// transport_bench's snapshot mode (--snapshot_cost): the
// goodput cell run with shard snapshots off and on (a Snapshotter per
// in-process shard writing every `every` into a temporary folder, as
// `ps_server --checkpoint_dir --checkpoint_every_s` does), trials
// interleaved so the machine's drift hits both alike, with each snapshot's
// copy and write time as the Snapshotter logged them.
//
//   auto cost = RunSnapshotCost(absl::Seconds(1), 2, 5,
//       [&](const std::function<void(InProcessCluster*)>& on_cluster) {
//         return RunCellWith(on_cluster);  // bytes per second, or an error
//       });
//   std::printf("%s", SnapshotCostTable(*cost).c_str());
//
// Thread-compatible.
#ifndef DOWNPOUR_TESTS_BENCH_SNAPSHOT_COST_H_
#define DOWNPOUR_TESTS_BENCH_SNAPSHOT_COST_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/bench/inprocess_cluster.h"

namespace downpour {

struct SnapshotCost {
  absl::Duration every;
  std::vector<double> off, on;  // Goodput per trial, bytes per second.
  std::vector<double> copy_ms, write_ms;  // Per snapshot written.
  std::vector<double> mib;                // Size of each snapshot.
  int failed = 0;
};

using SnapshotCell = std::function<absl::StatusOr<double>(
    const std::function<void(InProcessCluster*)>& on_cluster)>;

// `trials` rounds of (off, on) over a cluster of `shards`; a cell's or a
// snapshot's error aborts.
absl::StatusOr<SnapshotCost> RunSnapshotCost(absl::Duration every, int shards,
                                             int trials, const SnapshotCell& cell);

// A markdown table of goodput off/on (best, median, ratio) and the snapshot
// copy/write times (mean, max) and size.
std::string SnapshotCostTable(const SnapshotCost& cost);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_SNAPSHOT_COST_H_
