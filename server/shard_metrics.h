// File: server/shard_metrics.h
//
// The counters a shard keeps about its traffic, for ShardStats
// (common/shard_stats.h): pulls, pushes applied and duplicate, bytes,
// refused requests by reason, dropped updates, and the staleness of applied
// chunk updates (mean, max and a histogram for p50/p99, exact up to 1023
// and within 0.8% above). Mode-specific
// figures (steps, evictions, ssp lead) come from the step policy instead.
//
//   metrics.RecordStaleness(s);
//   return metrics.Reject("wrong_size", absl::InvalidArgumentError(...));
//   ShardStats s; metrics.FillStats(&s);
//
// Thread-safety: every method may be called concurrently. The counters are
// relaxed atomics (one fetch_add on the push path); a snapshot taken while
// requests run may mix counts from before and after a request.
#ifndef DOWNPOUR_SERVER_SHARD_METRICS_H_
#define DOWNPOUR_SERVER_SHARD_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shard_stats.h"

namespace downpour {

// Counts of applied-update staleness, lock-free, over the whole int64 range
// in 35 KiB: exact below kExact (1024), then log-spaced: each octave
// [2^k, 2^(k+1)) above it is cut into kSubBuckets (64) equal buckets of
// width 2^(k-6). A quantile above the exact range is reported as the middle
// of its bucket, so it is off by at most half a bucket, 2^(k-7): at most
// 1/128 (0.8%) of the true value. Negative staleness counts as 0.
class StalenessHistogram {
 public:
  static constexpr int kExact = 1024;  // 2^10
  static constexpr int kSubBuckets = 64;
  static constexpr int kBuckets = kExact + (63 - 10) * kSubBuckets;

  void Add(int64_t staleness, int64_t times = 1);
  // The staleness with at least q of the mass at or below it (0 when empty):
  // exact below kExact, within 1/128 of it above.
  int64_t Quantile(double q) const;

 private:
  static int BucketOf(int64_t staleness);
  // The value reported for bucket i: itself when exact, else its middle.
  static int64_t ValueOf(int bucket);

  std::array<std::atomic<int64_t>, kBuckets> counts_{};
};

class ShardMetrics {
 public:
  void RecordPull(int64_t bytes) {
    pulls_.fetch_add(1, std::memory_order_relaxed);
    bytes_pulled_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void RecordPushBytes(int64_t bytes) {
    bytes_pushed_.fetch_add(bytes, std::memory_order_relaxed);
  }
  // A whole push (all its parts) was taken in.
  void RecordPushApplied() {
    pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  }
  void RecordDuplicate() {
    pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
  }
  // A standby that took its primary's state continues its counts.
  void AddPushCounts(int64_t applied, int64_t duplicate) {
    pushes_applied_.fetch_add(applied, std::memory_order_relaxed);
    pushes_duplicate_.fetch_add(duplicate, std::memory_order_relaxed);
  }
  // A push (or a sync gradient) dropped as too stale.
  void RecordDropped() { dropped_stale_.fetch_add(1, std::memory_order_relaxed); }
  // `times` applied chunk updates, each of staleness `staleness`.
  void RecordStaleness(int64_t staleness, int64_t times = 1);

  // A snapshot write by this process that succeeded (written at `unix_s`) or
  // failed; Restored: the shard was restored from a snapshot written at
  // `unix_s` (it is the one a crash would fall back to).
  void RecordSnapshotWritten(int64_t unix_s) {
    snapshots_written_.fetch_add(1, std::memory_order_relaxed);
    RecordSnapshotRestored(unix_s);
  }
  void RecordSnapshotFailed() {
    snapshots_failed_.fetch_add(1, std::memory_order_relaxed);
  }
  void RecordSnapshotRestored(int64_t unix_s) {
    int64_t prev = last_snapshot_unix_s_.load(std::memory_order_relaxed);
    while (prev < unix_s && !last_snapshot_unix_s_.compare_exchange_weak(
                                prev, unix_s, std::memory_order_relaxed)) {
    }
  }

  // Counts a refused request under `reason` and returns `status`.
  absl::Status Reject(const std::string& reason, absl::Status status)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Sets the fields this unit counts: pulls, pushes_applied,
  // pushes_duplicate, bytes_pulled, bytes_pushed, rejected, staleness_mean,
  // staleness_max, staleness_p50, staleness_p99, dropped_stale,
  // last_snapshot_unix_s, snapshots_written, snapshots_failed.
  void FillStats(ShardStats* s) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::atomic<int64_t> pulls_{0}, pushes_applied_{0}, pushes_duplicate_{0};
  std::atomic<int64_t> bytes_pulled_{0}, bytes_pushed_{0};
  std::atomic<int64_t> staleness_sum_{0}, staleness_count_{0};
  std::atomic<int64_t> staleness_max_{0};
  std::atomic<int64_t> dropped_stale_{0};
  std::atomic<int64_t> last_snapshot_unix_s_{0}, snapshots_written_{0},
      snapshots_failed_{0};
  StalenessHistogram staleness_hist_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SHARD_METRICS_H_
