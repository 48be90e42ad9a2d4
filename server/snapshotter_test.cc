// The Snapshotter reports every write to the store's stats
// (last_snapshot_unix_s, snapshots_written, snapshots_failed), a restore sets
// the time of the snapshot it came from, and the periodic thread writes on its
// own.
#include "server/snapshotter.h"

#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using store_test::ChunksOf;
using store_test::MakeFixture;

std::string FreshDir(const std::string& name) {
  const std::string d = TestTmpPath(name);
  std::filesystem::remove_all(d);
  return d;
}

std::unique_ptr<ParameterStore> Store() {
  ParameterStoreOptions o;
  o.shard_index = 0;
  o.num_shards = 1;
  o.optimizer.name = "sgd";
  o.optimizer.learning_rate = 0.1f;
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

std::unique_ptr<ParameterStore> DeclaredStore() {
  store_test::Fixture f = MakeFixture(1);
  auto s = Store();
  EXPECT_TRUE(s->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  return s;
}

SnapshotterOptions Options(const std::string& dir, absl::Duration every) {
  SnapshotterOptions o;
  o.dir = dir;
  o.every = every;
  o.log = [](const std::string&) {};
  return o;
}

TEST(SnapshotterTest, WritesAndFailuresAreCountedInStats) {
  auto store = DeclaredStore();
  EXPECT_EQ(store->Stats().last_snapshot_unix_s, 0);
  const std::string dir = FreshDir("snaps");
  Snapshotter snap(Options(dir, absl::ZeroDuration()), store.get());
  const int64_t before = absl::ToUnixSeconds(absl::Now());
  ASSERT_TRUE(snap.WriteNow().ok());
  ShardStats s = store->Stats();
  EXPECT_EQ(s.snapshots_written, 1);
  EXPECT_EQ(s.snapshots_failed, 0);
  EXPECT_GE(s.last_snapshot_unix_s, before);
  EXPECT_LE(s.last_snapshot_unix_s, absl::ToUnixSeconds(absl::Now()));

  // A folder that cannot be made (a file is in the way): counted as failed,
  // and the time still names the snapshot a restart would use.
  const std::string blocked = FreshDir("blocked");
  std::ofstream(blocked) << "not a folder";
  Snapshotter bad(Options(blocked + "/sub", absl::ZeroDuration()), store.get());
  EXPECT_FALSE(bad.WriteNow().ok());
  s = store->Stats();
  EXPECT_EQ(s.snapshots_written, 1);
  EXPECT_EQ(s.snapshots_failed, 1);
  EXPECT_GE(s.last_snapshot_unix_s, before);
}

TEST(SnapshotterTest, NothingIsCountedBeforeTheDeclaration) {
  auto store = Store();
  Snapshotter snap(Options(FreshDir("undeclared"), absl::ZeroDuration()), store.get());
  ASSERT_TRUE(snap.WriteNow().ok());
  const ShardStats s = store->Stats();
  EXPECT_EQ(s.snapshots_written + s.snapshots_failed + s.last_snapshot_unix_s, 0);
}

TEST(SnapshotterTest, RestoreSetsTheTimeOfTheSnapshotItCameFrom) {
  const std::string dir = FreshDir("restore");
  auto a = DeclaredStore();
  ASSERT_TRUE(Snapshotter(Options(dir, absl::ZeroDuration()), a.get()).WriteNow().ok());
  const int64_t written = a->Stats().last_snapshot_unix_s;
  ASSERT_GT(written, 0);
  auto b = Store();
  ASSERT_TRUE(RestoreLatestSnapshot(dir, 0, 1, b.get(), [](const std::string&) {}).ok());
  const ShardStats s = b->Stats();
  EXPECT_TRUE(s.initialized);
  EXPECT_EQ(s.last_snapshot_unix_s, written);
  EXPECT_EQ(s.snapshots_written, 0);  // this process wrote none
}

TEST(SnapshotterTest, ThePeriodicThreadWritesOnItsOwn) {
  auto store = DeclaredStore();
  Snapshotter snap(Options(FreshDir("periodic"), absl::Milliseconds(50)), store.get());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (store->Stats().snapshots_written < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  snap.Stop();
  EXPECT_GE(store->Stats().snapshots_written, 2);
  EXPECT_EQ(store->Stats().snapshots_failed, 0);
}

}  // namespace
}  // namespace downpour
