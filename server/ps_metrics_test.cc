// The snapshot series in a shard's Prometheus metrics: no snapshot age until a
// snapshot exists, then downpour_snapshot_age_seconds and the write counts from
// the store's stats.
#include "server/ps_metrics.h"

#include <filesystem>

#include "common/test_files.h"
#include "gtest/gtest.h"
#include "server/snapshotter.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

const prometheus::MetricFamily* Find(const std::vector<prometheus::MetricFamily>& fs,
                                     const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

double Outcome(const prometheus::MetricFamily& f, const std::string& outcome) {
  for (const auto& m : f.metric) {
    for (const auto& l : m.label) {
      if (l.name == "outcome" && l.value == outcome) return m.counter.value;
    }
  }
  ADD_FAILURE() << "no outcome " << outcome;
  return -1;
}

TEST(ServerMetricsTest, SnapshotAgeAppearsOnceASnapshotIsWritten) {
  ParameterStoreOptions o;
  o.shard_index = 0;
  o.num_shards = 1;
  o.optimizer.name = "sgd";
  auto store = ParameterStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  store_test::Fixture f = store_test::MakeFixture(1);
  ASSERT_TRUE((*store)->Declare(f.layout, store_test::ChunksOf(f, 0, f.flat)).ok());
  prometheus::Registry registry;
  ServerMetrics metrics(&registry, store->get(), nullptr, 0, nullptr);

  auto fs = metrics.Collect();
  EXPECT_EQ(Find(fs, "downpour_snapshot_age_seconds"), nullptr);
  ASSERT_NE(Find(fs, "downpour_snapshots_total"), nullptr);
  EXPECT_EQ(Outcome(*Find(fs, "downpour_snapshots_total"), "written"), 0);

  const std::string dir = TestTmpPath("metrics_snaps");
  std::filesystem::remove_all(dir);
  SnapshotterOptions so;
  so.dir = dir;
  so.every = absl::ZeroDuration();
  so.log = [](const std::string&) {};
  ASSERT_TRUE(Snapshotter(so, store->get()).WriteNow().ok());

  fs = metrics.Collect();
  const prometheus::MetricFamily* age = Find(fs, "downpour_snapshot_age_seconds");
  ASSERT_NE(age, nullptr);
  ASSERT_EQ(age->metric.size(), 1u);
  EXPECT_GE(age->metric[0].gauge.value, 0);
  EXPECT_LT(age->metric[0].gauge.value, 10);
  EXPECT_EQ(age->metric[0].label.at(0).name, "shard");
  const prometheus::MetricFamily* when =
      Find(fs, "downpour_last_snapshot_timestamp_seconds");
  ASSERT_NE(when, nullptr);
  EXPECT_EQ(when->metric[0].gauge.value, (*store)->Stats().last_snapshot_unix_s);
  EXPECT_EQ(Outcome(*Find(fs, "downpour_snapshots_total"), "written"), 1);
  EXPECT_EQ(Outcome(*Find(fs, "downpour_snapshots_total"), "failed"), 0);
}

}  // namespace
}  // namespace downpour
