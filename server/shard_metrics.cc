#include "server/shard_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace downpour {

int StalenessHistogram::BucketOf(int64_t staleness) {
  if (staleness < kExact) return static_cast<int>(std::max<int64_t>(staleness, 0));
  const int k = 63 - __builtin_clzll(static_cast<uint64_t>(staleness));  // >= 10
  // The 6 bits below the leading one pick the bucket within the octave.
  const int sub = static_cast<int>(staleness >> (k - 6)) - kSubBuckets;
  return kExact + (k - 10) * kSubBuckets + sub;
}

int64_t StalenessHistogram::ValueOf(int bucket) {
  if (bucket < kExact) return bucket;
  const int k = 10 + (bucket - kExact) / kSubBuckets;
  const int sub = (bucket - kExact) % kSubBuckets;
  const int64_t width = int64_t{1} << (k - 6);
  return (kSubBuckets + sub) * width + width / 2;
}

void StalenessHistogram::Add(int64_t staleness, int64_t times) {
  counts_[BucketOf(staleness)].fetch_add(times, std::memory_order_relaxed);
}

int64_t StalenessHistogram::Quantile(double q) const {
  int64_t total = 0;
  for (const auto& c : counts_) total += c.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  const int64_t target = static_cast<int64_t>(std::ceil(q * total));
  int64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i].load(std::memory_order_relaxed);
    if (seen >= std::max<int64_t>(target, 1)) return ValueOf(i);
  }
  // Only when counts grew during the scan past what `total` saw.
  return ValueOf(kBuckets - 1);
}

void ShardMetrics::RecordStaleness(int64_t staleness, int64_t times) {
  staleness_sum_.fetch_add(staleness * times, std::memory_order_relaxed);
  staleness_count_.fetch_add(times, std::memory_order_relaxed);
  staleness_hist_.Add(staleness, times);
  int64_t prev = staleness_max_.load(std::memory_order_relaxed);
  while (staleness > prev &&
         !staleness_max_.compare_exchange_weak(prev, staleness)) {
  }
}

absl::Status ShardMetrics::Reject(const std::string& reason,
                                  absl::Status status) {
  absl::MutexLock l(&mu_);
  ++rejected_[reason];
  return status;
}

void ShardMetrics::FillStats(ShardStats* s) const {
  s->pulls = pulls_.load();
  s->pushes_applied = pushes_applied_.load();
  s->pushes_duplicate = pushes_duplicate_.load();
  s->bytes_pulled = bytes_pulled_.load();
  s->bytes_pushed = bytes_pushed_.load();
  const int64_t n = staleness_count_.load();
  s->staleness_mean =
      n == 0 ? 0.0 : static_cast<double>(staleness_sum_.load()) / n;
  s->staleness_max = staleness_max_.load();
  s->staleness_p50 = staleness_hist_.Quantile(0.5);
  s->staleness_p99 = staleness_hist_.Quantile(0.99);
  s->dropped_stale = dropped_stale_.load();
  s->last_snapshot_unix_s = last_snapshot_unix_s_.load();
  s->snapshots_written = snapshots_written_.load();
  s->snapshots_failed = snapshots_failed_.load();
  absl::MutexLock l(&mu_);
  s->rejected = rejected_;
}

}  // namespace downpour
