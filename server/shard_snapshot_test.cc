// A shard's snapshot round-trips through its file into a fresh store (values,
// optimizer state, versions, dedup, mode state); corrupt, truncated and foreign
// files are refused and the previous one is used; only the newest
// kKeepSnapshots stay.
#include "server/shard_snapshot.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>

#include "absl/synchronization/notification.h"
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

std::unique_ptr<ParameterStore> Store(TrainMode mode, int shard, int shards) {
  ParameterStoreOptions o;
  o.shard_index = shard;
  o.num_shards = shards;
  o.optimizer.name = "adagrad";
  o.optimizer.learning_rate = 0.1f;
  o.mode = mode;
  o.num_workers = mode == TrainMode::kAsync ? 0 : 2;
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// A shard restarted in the middle of an ssp push: the parts its snapshot
// holds claims for count as applied, so the retried rest completes the push
// (the worker's clock moves) although the claimed parts are duplicates now.
TEST(ShardSnapshotTest, SspPushHalfInBeforeARestartCompletesAfterIt) {
  store_test::Fixture f = MakeFixture(2);
  auto a = Store(TrainMode::kSsp, 1, 2);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 1, f.flat)).ok());
  std::vector<float> g(f.flat.size(), 0.5f);
  const std::vector<ChunkBytes> all = ChunksOf(f, 1, g);
  ASSERT_GE(all.size(), 2u);
  const std::vector<ChunkBytes> first(all.begin(), all.begin() + 1);
  const std::vector<ChunkBytes> rest(all.begin() + 1, all.end());
  ASSERT_TRUE(a->Push(PushId{1, 1, 0, 1, 7}, all).ok());     // Clock 1.
  ASSERT_TRUE(a->Push(PushId{0, 1, 0, 2, 42}, first).ok());  // Half a push.
  absl::StatusOr<ShardSnapshot> s = a->Save();
  ASSERT_TRUE(s.ok()) << s.status();
  auto b = Store(TrainMode::kSsp, 1, 2);
  ASSERT_TRUE(b->Restore(*s).ok());
  EXPECT_TRUE(b->Push(PushId{0, 1, 0, 2, 42}, first)->duplicate);
  // Worker 1 at clock 1 (staleness 0) waits for worker 0's first push.
  PullSpec spec;
  spec.worker_id = 1;
  spec.worker_clock = 1;
  absl::Notification answered;
  b->PullWhenReady(spec, [](const ChunkView&) {}, [&](absl::Status st) {
    EXPECT_TRUE(st.ok()) << st;
    answered.Notify();
  });
  EXPECT_FALSE(answered.HasBeenNotified());
  ASSERT_TRUE(b->Push(PushId{0, 1, 1, 2, 42}, rest).ok());
  EXPECT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(b->Stats().pushes_applied, 1);  // This process completed one.
}

TEST(ShardSnapshotTest, RestoredStoreContinuesExactlyLikeTheOriginal) {
  for (TrainMode mode : {TrainMode::kAsync, TrainMode::kSsp}) {
    store_test::Fixture f = MakeFixture(2);
    auto a = Store(mode, 1, 2);
    ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 1, f.flat)).ok());
    std::vector<float> g(f.flat.size(), 0.5f);
    for (int64_t seq = 1; seq <= 3; ++seq) {
      ASSERT_TRUE(a->Push(PushId{0, seq, 0, 1, 42}, ChunksOf(f, 1, g)).ok());
    }
    absl::StatusOr<ShardSnapshot> s = a->Save();
    ASSERT_TRUE(s.ok()) << s.status();
    const std::string dir = FreshDir("snap");
    absl::StatusOr<std::string> path = WriteShardSnapshot(dir, *s, {});
    ASSERT_TRUE(path.ok()) << path.status();
    absl::StatusOr<LoadedSnapshot> loaded = LoadLatestShardSnapshot(dir, 1, 2);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->path, *path);
    auto b = Store(mode, 1, 2);
    ASSERT_TRUE(b->Restore(loaded->snapshot).ok());
    // A retry of seq 3 is still a retry; seq 4 applies the same on both
    // (the adagrad accumulators came back too).
    EXPECT_TRUE(b->Push(PushId{0, 3, 0, 1, 42}, ChunksOf(f, 1, g))->duplicate);
    ASSERT_TRUE(a->Push(PushId{0, 4, 0, 1, 42}, ChunksOf(f, 1, g)).ok());
    ASSERT_TRUE(b->Push(PushId{0, 4, 0, 1, 42}, ChunksOf(f, 1, g)).ok());
    std::vector<int64_t> va, vb;
    EXPECT_EQ(store_test::Snapshot(*a, f, &va), store_test::Snapshot(*b, f, &vb));
    EXPECT_EQ(va, vb);
    EXPECT_EQ(a->Stats().ssp_max_lead, b->Stats().ssp_max_lead);
    // A restored store is declared: a second restore is refused.
    EXPECT_EQ(b->Restore(loaded->snapshot).code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// A layout with pinned blocks comes back with them (and one without has
// none: older snapshots have no such key).
TEST(ShardSnapshotTest, PinnedBlocksComeBackWithTheLayout) {
  store_test::Fixture f = MakeFixture(2);
  f.layout.pinned_blocks = {1, 1};
  f.map = *ComputeShardMap(f.layout);
  auto a = Store(TrainMode::kSync, 1, 2);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 1, f.flat)).ok());
  absl::StatusOr<ShardSnapshot> s = a->Save();
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string dir = FreshDir("pinned");
  ASSERT_TRUE(WriteShardSnapshot(dir, *s, {}).ok());
  absl::StatusOr<LoadedSnapshot> loaded = LoadLatestShardSnapshot(dir, 1, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot.layout, f.layout);
  auto b = Store(TrainMode::kSync, 1, 2);
  ASSERT_TRUE(b->Restore(loaded->snapshot).ok());
  EXPECT_EQ(b->shard_map()->shard_chunks, f.map.shard_chunks);
}

TEST(ShardSnapshotTest, CorruptOrTruncatedFallsBackToThePreviousOne) {
  store_test::Fixture f = MakeFixture(1);
  auto a = Store(TrainMode::kAsync, 0, 1);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const std::string dir = FreshDir("corrupt");
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<ShardSnapshot> s = a->Save();
    ASSERT_TRUE(s.ok());
    s->created_unix_ms += i;  // distinct names within one millisecond
    paths.push_back(*WriteShardSnapshot(dir, *s, {}));
  }
  // Pruned to the newest two.
  EXPECT_FALSE(std::filesystem::exists(paths[0]));
  EXPECT_TRUE(std::filesystem::exists(paths[1]));
  // Flip one byte in the data of the newest: checksum.
  {
    std::fstream io(paths[2], std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-5, std::ios::end);
    io.put('\x7f');
  }
  absl::StatusOr<LoadedSnapshot> l = LoadLatestShardSnapshot(dir, 0, 1);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->path, paths[1]);
  ASSERT_EQ(l->refused.size(), 1u);
  EXPECT_NE(l->refused[0].find("checksum"), std::string::npos) << l->refused[0];
  // Truncate the older one too: snapshots but none usable is DataLoss,
  // naming both (not NotFound, which starts a shard empty).
  std::filesystem::resize_file(paths[1], 100);
  l = LoadLatestShardSnapshot(dir, 0, 1);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(l.status().message().find("checksum"), std::string::npos)
      << l.status();
  EXPECT_NE(l.status().message().find("truncated"), std::string::npos)
      << l.status();
  // Another shard count is never picked up.
  EXPECT_EQ(LoadLatestShardSnapshot(dir, 0, 2).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShardSnapshotTest, SnapshotOfAnotherShardOrOptimizerIsRefused) {
  store_test::Fixture f = MakeFixture(2);
  auto a = Store(TrainMode::kAsync, 0, 2);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  ShardSnapshot s = *a->Save();
  EXPECT_EQ(Store(TrainMode::kAsync, 1, 2)->Restore(s).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Store(TrainMode::kSsp, 0, 2)->Restore(s).code(),
            absl::StatusCode::kFailedPrecondition);
  s.chunks.pop_back();
  auto b = Store(TrainMode::kAsync, 0, 2);
  EXPECT_EQ(b->Restore(s).code(), absl::StatusCode::kInvalidArgument);
  // A refused restore leaves the shard declarable.
  EXPECT_TRUE(b->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
}

}  // namespace
}  // namespace downpour

namespace downpour {
namespace {

TEST(ShardSnapshotBoundsTest, DedupRowsAreCompactAndRoundTrip) {
  store_test::Fixture f = MakeFixture(1);
  auto a = Store(TrainMode::kAsync, 0, 1);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  ShardSnapshot s = *a->Save();
  DedupEntry e;
  e.worker_id = 3;
  e.incarnation = 99;
  e.seq = 5;
  e.num_parts = 7;
  e.parts = {true, false, true, true, false, false, true};
  e.retired = {11, 12};
  s.dedup = {e};
  const std::string dir = FreshDir("compact");
  absl::StatusOr<std::string> path = WriteShardSnapshot(dir, s, {});
  ASSERT_TRUE(path.ok()) << path.status();
  // Two hex digits for seven parts, not a JSON list of booleans.
  EXPECT_NE(ReadBytes(*path).find("\\\"parts_hex\\\":\\\"d4\\\""),
            std::string::npos);
  absl::StatusOr<ShardSnapshot> back = ReadShardSnapshot(*path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->dedup.size(), 1u);
  EXPECT_EQ(back->dedup[0].parts, e.parts);
  EXPECT_EQ(back->dedup[0].retired, e.retired);
  EXPECT_EQ(back->dedup[0].incarnation, 99u);
}

TEST(ShardSnapshotBoundsTest, HeaderAboveTheLimitIsNotWrittenAndKeepsTheOldOnes) {
  store_test::Fixture f = MakeFixture(1);
  auto a = Store(TrainMode::kAsync, 0, 1);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const std::string dir = FreshDir("too_big");
  std::vector<std::string> paths;
  for (int i = 0; i < 2; ++i) {
    ShardSnapshot s = *a->Save();
    s.created_unix_ms += i;
    paths.push_back(*WriteShardSnapshot(dir, s, {}));
  }
  ShardSnapshot big = *a->Save();
  big.created_unix_ms += 10;
  DedupEntry e;
  e.seq = 1;
  e.num_parts = 1 << 16;
  e.parts.assign(e.num_parts, true);
  big.dedup = {e};
  SnapshotWriteOptions o;
  o.max_header_bytes = 8 << 10;
  absl::StatusOr<std::string> path = WriteShardSnapshot(dir, big, o);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(path.status().message().find("previous snapshots are kept"),
            std::string::npos)
      << path.status();
  for (const std::string& p : paths) EXPECT_TRUE(std::filesystem::exists(p)) << p;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            2);
  absl::StatusOr<LoadedSnapshot> l = LoadLatestShardSnapshot(dir, 0, 1);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->path, paths[1]);
}

TEST(ShardSnapshotBoundsTest, FilesAreOwnerOnly) {
  store_test::Fixture f = MakeFixture(1);
  auto a = Store(TrainMode::kAsync, 0, 1);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const std::string dir = FreshDir("modes") + "/a/b";
  absl::StatusOr<std::string> path = WriteShardSnapshot(dir, *a->Save(), {});
  ASSERT_TRUE(path.ok()) << path.status();
  using std::filesystem::perms;
  EXPECT_EQ(std::filesystem::status(*path).permissions(),
            perms::owner_read | perms::owner_write);
  EXPECT_EQ(std::filesystem::status(dir).permissions(), perms::owner_all);
}

TEST(ShardSnapshotBoundsTest, NonFiniteValuesAndHugeCountersAreRefused) {
  store_test::Fixture f = MakeFixture(1);
  auto a = Store(TrainMode::kAsync, 0, 1);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const ShardSnapshot good = *a->Save();
  // `in_file`: refused when read (values, counters); else only by the store,
  // which knows the shard's size.
  auto poison = [&](const std::string& name,
                    const std::function<void(ShardSnapshot*)>& change,
                    bool in_file = true) {
    ShardSnapshot s = good;
    change(&s);
    const std::string dir = FreshDir(name);
    ASSERT_TRUE(WriteShardSnapshot(dir, s, {}).ok());
    // The file's checksum matches: only the values give it away.
    absl::StatusOr<LoadedSnapshot> l = LoadLatestShardSnapshot(dir, 0, 1);
    EXPECT_EQ(l.status().code(), in_file ? absl::StatusCode::kDataLoss
                                         : absl::StatusCode::kOk)
        << name << " " << l.status();
    // The store refuses it too, however it got the snapshot.
    EXPECT_EQ(Store(TrainMode::kAsync, 0, 1)->Restore(s).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  };
  poison("nan", [](ShardSnapshot* s) {
    auto v = std::make_shared<std::vector<float>>(*s->chunks[0].values);
    (*v)[0] = std::nanf("");
    s->chunks[0].values = v;
  });
  poison("inf_opt", [](ShardSnapshot* s) {
    s->chunks[0].opt_state[0] = std::numeric_limits<float>::infinity();
  });
  poison("version", [](ShardSnapshot* s) {
    s->chunks[0].version = 1'000'000'000'000'000'000;
  });
  poison("seq", [](ShardSnapshot* s) {
    DedupEntry e;
    e.seq = int64_t{1} << 62;
    e.parts = {true};
    s->dedup = {e};
  });
  poison("parts", [](ShardSnapshot* s) {
    DedupEntry e;
    e.seq = 1;
    e.num_parts = 1 << 20;
    e.parts.assign(e.num_parts, false);
    s->dedup = {e};
  }, /*in_file=*/false);
}

}  // namespace
}  // namespace downpour
