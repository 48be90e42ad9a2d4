#include "server/shard_metrics.h"

#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(StalenessHistogramTest, QuantilesOfSmallAndHugeStaleness) {
  StalenessHistogram h;
  EXPECT_EQ(h.Quantile(0.5), 0);
  h.Add(0);
  h.Add(1);
  h.Add(2);
  EXPECT_EQ(h.Quantile(0.5), 1);
  EXPECT_EQ(h.Quantile(0.99), 2);
  EXPECT_EQ(h.Quantile(0.0), 0);
  // Large staleness is reported within 1/128 (it used to be clamped to the
  // last exact bucket, 1024); negatives count as 0.
  h.Add(1 << 20, 10);
  h.Add(-5);
  EXPECT_NEAR(h.Quantile(0.99), 1 << 20, (1 << 20) / 128.0);
  EXPECT_EQ(h.Quantile(0.1), 0);  // 2 of 14 at 0.
}

// Percentiles stay right far above the exact range (they used to stop at
// 1024): within the histogram's stated bound of 1/128 of the value.
TEST(StalenessHistogramTest, LargeStalenessPercentilesWithinTheBound) {
  ShardMetrics m;
  for (int64_t s = 0; s < 3000; ++s) m.RecordStaleness(s);
  ShardStats st;
  m.FillStats(&st);
  EXPECT_DOUBLE_EQ(st.staleness_mean, 1499.5);
  EXPECT_EQ(st.staleness_max, 2999);
  // The 1500th and 2970th smallest values.
  EXPECT_NEAR(st.staleness_p50, 1499, 1499 / 128.0);
  EXPECT_NEAR(st.staleness_p99, 2969, 2969 / 128.0);
  StalenessHistogram h;
  const int64_t big = int64_t{1} << 40;
  h.Add(big + 12345, 100);
  EXPECT_NEAR(static_cast<double>(h.Quantile(0.5)), big + 12345.0,
              (big + 12345.0) / 128);
  h.Add(std::numeric_limits<int64_t>::max());
  EXPECT_GT(h.Quantile(1.0), int64_t{1} << 62);
}

TEST(ShardMetricsTest, CountsAndStalenessGoIntoTheStats) {
  ShardMetrics m;
  m.RecordPull(400);
  m.RecordPull(100);
  m.RecordPushBytes(64);
  m.RecordPushApplied();
  m.RecordDuplicate();
  m.RecordDuplicate();
  m.RecordDropped();
  m.RecordStaleness(0, 3);
  m.RecordStaleness(4);
  ShardStats s;
  m.FillStats(&s);
  EXPECT_EQ(s.pulls, 2);
  EXPECT_EQ(s.bytes_pulled, 500);
  EXPECT_EQ(s.bytes_pushed, 64);
  EXPECT_EQ(s.pushes_applied, 1);
  EXPECT_EQ(s.pushes_duplicate, 2);
  EXPECT_EQ(s.dropped_stale, 1);
  EXPECT_DOUBLE_EQ(s.staleness_mean, 1.0);
  EXPECT_EQ(s.staleness_max, 4);
  EXPECT_EQ(s.staleness_p50, 0);
  EXPECT_EQ(s.staleness_p99, 4);
  EXPECT_TRUE(s.rejected.empty());
}

TEST(ShardMetricsTest, RejectCountsByReasonAndPassesTheStatusThrough) {
  ShardMetrics m;
  absl::Status s = m.Reject("wrong_size", absl::InvalidArgumentError("x"));
  EXPECT_EQ(s, absl::InvalidArgumentError("x"));
  m.Reject("wrong_size", absl::InvalidArgumentError("y")).IgnoreError();
  m.Reject("non_finite", absl::InvalidArgumentError("z")).IgnoreError();
  ShardStats stats;
  m.FillStats(&stats);
  EXPECT_EQ(stats.rejected["wrong_size"], 2);
  EXPECT_EQ(stats.rejected["non_finite"], 1);
}

TEST(ShardMetricsTest, ConcurrentStalenessKeepsTheMaxAndTheCount) {
  ShardMetrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < 1000; ++i) m.RecordStaleness(t * 1000 + i);
    });
  }
  for (auto& th : threads) th.join();
  ShardStats s;
  m.FillStats(&s);
  EXPECT_EQ(s.staleness_max, 3999);
  EXPECT_DOUBLE_EQ(s.staleness_mean, 1999.5);
}

}  // namespace
}  // namespace downpour
