#include "server/parameter_store.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using namespace store_test;  // NOLINT: test helpers only.

TEST(ParameterStoreTest, DeclareInitializesOnceAndPullReturnsValues) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(1, 2);
  auto fresh = store->Declare(f.layout, ChunksOf(f, 1, f.flat));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(*fresh);
  std::vector<float> other(f.flat.size(), 42.0f);
  auto again = store->Declare(f.layout, ChunksOf(f, 1, other));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);  // first declaration wins; values ignored

  std::vector<int64_t> versions;
  std::vector<float> got = Snapshot(*store, f, &versions);
  for (int32_t id : f.map.shard_chunks[1]) {
    const Chunk& c = f.map.chunks[id];
    EXPECT_EQ(versions[id], 0);
    for (int64_t i = 0; i < c.num_elements; ++i) {
      ASSERT_EQ(got[c.flat_offset + i], f.flat[c.flat_offset + i]);
    }
  }
  ShardStats s = store->Stats();
  EXPECT_TRUE(s.initialized);
  EXPECT_EQ(s.num_elements, f.map.shard_elements[1]);
}

TEST(ParameterStoreTest, RequestsBeforeDeclarationFailPrecondition) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1);
  EXPECT_EQ(store->Pull({}, [](const ChunkView&) {}).code(),
            absl::StatusCode::kFailedPrecondition);
  auto r = store->Push(0, 1, ChunksOf(f, 0, f.flat));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("declared"), std::string::npos);
  EXPECT_EQ(store->Stats().rejected["not_initialized"], 2);
}

TEST(ParameterStoreTest, LayoutMismatchIsRejectedAndChangesNothing) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  ModelLayout other = f.layout;
  other.tensors[1].shape = {8};
  auto r = store->Declare(other, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("differs"), std::string::npos);
  EXPECT_EQ(Snapshot(*store, f), Snapshot(*store, f));
  EXPECT_EQ(store->Stats().rejected["layout_mismatch"], 1);

  // A layout cut for a different number of shards, on a fresh store.
  auto fresh = NewStore(0, 2);
  Fixture f3 = MakeFixture(3);
  EXPECT_EQ(fresh->Declare(f3.layout, ChunksOf(f3, 0, f3.flat)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fresh->Stats().initialized);
}

// An absurd layout is refused before anything is built, and the shard still
// takes a valid one afterwards (it used to keep the absurd one and then
// refuse the valid one as "differing").
TEST(ParameterStoreTest, AbsurdLayoutIsRefusedAndAValidOneStillDeclares) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1);
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{int64_t{1} << 33},
                                         {int64_t{1} << 32, int64_t{1} << 32},
                                         {3, int64_t{1} << 62}}) {
    ModelLayout absurd = f.layout;
    absurd.tensors[0].shape = shape;
    auto r = store->Declare(absurd, {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_NE(r.status().message().find("max_total_elements"),
              std::string::npos)
        << r.status();
  }
  ModelLayout bad_chunks = f.layout;
  bad_chunks.max_chunk_bytes = 6;
  EXPECT_FALSE(store->Declare(bad_chunks, {}).ok());
  EXPECT_FALSE(store->Stats().initialized);
  auto ok = store->Declare(f.layout, ChunksOf(f, 0, f.flat));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(*ok);
  EXPECT_TRUE(store->Stats().initialized);
}

TEST(ParameterStoreTest, LayoutLimitsComeFromTheOptions) {
  Fixture f = MakeFixture(1);
  ParameterStoreOptions o;
  o.layout_limits.max_tensors = 2;
  auto store = ParameterStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Declare(f.layout, ChunksOf(f, 0, f.flat));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("max_tensors = 2"), std::string::npos)
      << r.status();
  EXPECT_EQ((*store)->Stats().rejected["bad_request"], 1);
  o.layout_limits.max_chunks = 0;
  EXPECT_EQ(ParameterStore::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The mismatch message names the first difference, not a summary that two
// different layouts share.
TEST(ParameterStoreTest, LayoutMismatchSaysWhatDiffers) {
  ModelLayout a;
  a.tensors = {{"b", {3}}, {"w", {4, 8}}};
  ModelLayout b = a;
  b.tensors[1].shape = {8, 4};
  auto store = NewStore(0, 1);
  ASSERT_TRUE(store->Declare(a, {}).ok());
  auto r = store->Declare(b, {});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("differs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4,8]"), std::string::npos) << msg;
  ModelLayout c = a;
  c.max_chunk_bytes = 4096;
  r = store->Declare(c, {});
  EXPECT_NE(r.status().message().find("max_chunk_bytes 4096"),
            std::string::npos)
      << r.status();
  ModelLayout d = a;
  d.tensors.push_back({"x", {1}});
  r = store->Declare(d, {});
  EXPECT_NE(r.status().message().find("3 tensors"), std::string::npos)
      << r.status();
}

// DeclareModelResponse.initialized_now: "this request initialized the
// shard": only the call that gives the last chunk its values says true.
TEST(ParameterStoreTest, OnlyTheDeclarationThatCompletesTheShardInitializesIt) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1);
  std::vector<ChunkBytes> init = ChunksOf(f, 0, f.flat);
  ASSERT_GE(init.size(), 2u);
  const std::vector<ChunkBytes> first(init.begin(), init.begin() + 1);
  const std::vector<ChunkBytes> rest(init.begin() + 1, init.end());
  auto r1 = store->Declare(f.layout, first);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_FALSE(*r1);
  auto r2 = store->Declare(f.layout, rest);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_TRUE(*r2);
  auto r3 = store->Declare(f.layout, init);
  ASSERT_TRUE(r3.ok()) << r3.status();
  EXPECT_FALSE(*r3);
}

TEST(ParameterStoreTest, BadInitialValuesLeaveStoreUninitialized) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  std::vector<float> bad = f.flat;
  bad[f.map.chunks[f.map.shard_chunks[0][0]].flat_offset] = NAN;
  EXPECT_FALSE(store->Declare(f.layout, ChunksOf(f, 0, bad)).ok());
  EXPECT_FALSE(store->Stats().initialized);
  // A correct declaration still works afterwards.
  EXPECT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  EXPECT_TRUE(store->Stats().initialized);
}

TEST(ParameterStoreTest, DeclaredInPartsServesOnceEveryChunkHasValues) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  std::vector<ChunkBytes> init = ChunksOf(f, 0, f.flat);
  ASSERT_GE(init.size(), 2u);
  const ChunkBytes last = init.back();
  init.pop_back();
  // Not the call that initializes the shard (initialized_now).
  ASSERT_FALSE(*store->Declare(f.layout, init));
  EXPECT_FALSE(store->Stats().initialized);
  EXPECT_EQ(store->Pull({}, [](const ChunkView&) {}).code(),
            absl::StatusCode::kFailedPrecondition);
  // A part with a bad value changes nothing, the missing chunk stays missing.
  std::vector<float> bad = f.flat;
  bad[f.map.chunks[last.chunk_id].flat_offset] = INFINITY;
  std::vector<ChunkBytes> bad_last = ChunksOf(f, 0, bad);
  EXPECT_FALSE(store->Declare(f.layout, {bad_last.back()}).ok());
  EXPECT_FALSE(store->Stats().initialized);
  // Another worker's later values for chunks that have some are ignored.
  std::vector<float> other(f.flat.size(), 7.0f);
  std::vector<ChunkBytes> all_other = ChunksOf(f, 0, other);
  all_other.pop_back();
  EXPECT_FALSE(*store->Declare(f.layout, all_other));
  ASSERT_TRUE(*store->Declare(f.layout, {last}));
  EXPECT_TRUE(store->Stats().initialized);
  std::vector<float> got(f.flat.size(), -1.0f);
  ASSERT_TRUE(store->Pull({}, [&](const ChunkView& c) {
    std::copy(c.data, c.data + c.num_elements,
              got.begin() + f.map.chunks[c.chunk_id].flat_offset);
  }).ok());
  for (int32_t id : f.map.shard_chunks[0]) {
    const Chunk& c = f.map.chunks[id];
    for (int64_t i = 0; i < c.num_elements; ++i) {
      ASSERT_EQ(got[c.flat_offset + i], f.flat[c.flat_offset + i]);
    }
  }
}

TEST(ParameterStoreTest, SgdPushAppliesGradientAndBumpsVersion) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1, "sgd", 0.5f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  std::vector<float> grad(f.flat.size(), 2.0f);
  auto r = store->Push(3, 1, ChunksOf(f, 0, grad));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->duplicate);
  for (int64_t v : r->versions) EXPECT_EQ(v, 1);
  std::vector<int64_t> versions;
  std::vector<float> got = Snapshot(*store, f, &versions);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], f.flat[i] - 1.0f);
  for (int64_t v : versions) EXPECT_EQ(v, 1);
}

TEST(ParameterStoreTest, RetriedPushIsAppliedOnce) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  std::vector<float> grad(f.flat.size(), 1.0f);
  ASSERT_TRUE(store->Push(0, 1, ChunksOf(f, 0, grad)).ok());
  auto retry = store->Push(0, 1, ChunksOf(f, 0, grad));
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->duplicate);
  // Another worker's seq 1 is its own and is applied.
  ASSERT_FALSE(store->Push(1, 1, ChunksOf(f, 0, grad))->duplicate);
  std::vector<float> got = Snapshot(*store, f);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], f.flat[i] - 2.0f);
  EXPECT_EQ(store->Stats().pushes_applied, 2);
  EXPECT_EQ(store->Stats().pushes_duplicate, 1);
}

TEST(ParameterStoreTest, BadPushesAreRejectedCountedAndChangeNothing) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2, "adagrad", 0.1f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  std::vector<int64_t> v0;
  const std::vector<float> before = Snapshot(*store, f, &v0);
  std::vector<float> grad(f.flat.size(), 1.0f);
  std::vector<ChunkBytes> good = ChunksOf(f, 0, grad);

  // A chunk held by the other shard, alongside good ones.
  std::vector<ChunkBytes> unknown = good;
  unknown.push_back({f.map.shard_chunks[1][0], 0, grad.data(), 4 *
                     f.map.chunks[f.map.shard_chunks[1][0]].num_elements});
  EXPECT_EQ(store->Push(0, 1, unknown).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<ChunkBytes> out_of_range = good;
  out_of_range[0].chunk_id = 100000;
  EXPECT_FALSE(store->Push(0, 1, out_of_range).ok());
  // Wrong byte length on the last chunk: the earlier ones must not be applied.
  std::vector<ChunkBytes> short_one = good;
  short_one.back().num_bytes -= 4;
  auto r = store->Push(0, 1, short_one);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bytes"), std::string::npos);
  // NaN and Inf anywhere.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> g = grad;
    g[f.map.chunks[f.map.shard_chunks[0].back()].flat_offset] = bad;
    auto nr = store->Push(0, 1, ChunksOf(f, 0, g));
    EXPECT_EQ(nr.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(nr.status().message().find("NaN or Inf"), std::string::npos);
  }
  // The same chunk twice; a base version from the future; bad ids.
  std::vector<ChunkBytes> twice = good;
  twice.push_back(good[0]);
  EXPECT_FALSE(store->Push(0, 1, twice).ok());
  std::vector<ChunkBytes> future = good;
  future[0].base_version = 5;
  EXPECT_FALSE(store->Push(0, 1, future).ok());
  EXPECT_FALSE(store->Push(-1, 1, good).ok());
  EXPECT_FALSE(store->Push(0, 0, good).ok());

  std::vector<int64_t> v1;
  EXPECT_EQ(Snapshot(*store, f, &v1), before);
  EXPECT_EQ(v1, v0);
  ShardStats s = store->Stats();
  EXPECT_EQ(s.pushes_applied, 0);
  EXPECT_EQ(s.rejected["unknown_chunk"], 2);
  EXPECT_EQ(s.rejected["wrong_size"], 1);
  EXPECT_EQ(s.rejected["non_finite"], 3);
  EXPECT_EQ(s.rejected["bad_request"], 4);
  // The rejected seq 1 was never recorded: a good push with seq 1 applies.
  auto ok = store->Push(0, 1, good);
  ASSERT_TRUE(ok.ok());
  EXPECT_FALSE(ok->duplicate);
  EXPECT_NE(Snapshot(*store, f), before);
}

TEST(ParameterStoreTest, EmptyPushesAndMorePartsThanChunksAreRefused) {
  // Each would add a dedup row (or a bitmap of num_parts bits) per worker
  // id: refused before anything is recorded.
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const int chunks = static_cast<int>(f.map.shard_chunks[0].size());
  std::vector<float> grad(f.flat.size(), 1.0f);
  auto r = store->Push(PushId{0, 1, 0, 1, 7}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("without gradients"), std::string::npos)
      << r.status();
  r = store->Push(PushId{0, 1, 0, chunks + 1, 7}, ChunksOf(f, 0, grad));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("this shard's chunks"), std::string::npos)
      << r.status();
  r = store->Push(PushId{0, 1, 0, 1 << 20, 7}, ChunksOf(f, 0, grad));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->Save()->dedup.empty());
  EXPECT_EQ(store->Stats().rejected["bad_request"], 3);
  // A push in as many parts as chunks is fine.
  std::vector<ChunkBytes> all = ChunksOf(f, 0, grad);
  for (int p = 0; p < chunks; ++p) {
    ASSERT_TRUE(store->Push(PushId{0, 1, p, chunks, 7}, {all[p]}).ok()) << p;
  }
}

TEST(ParameterStoreTest, PullOfUnknownChunkIsRejected) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const int32_t ids[] = {f.map.shard_chunks[1][0]};
  int calls = 0;
  EXPECT_EQ(store->Pull(ids, [&](const ChunkView&) { ++calls; }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 0);
}

TEST(ParameterStoreTest, ConcurrentPushesLoseNothing) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1, "sgd", 1.0f);
  std::vector<float> zeros(f.flat.size(), 0.0f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, zeros)).ok());
  constexpr int kWorkers = 6, kPushes = 200;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      // Worker w pushes gradient -(w+1) everywhere; each push twice (retry).
      std::vector<float> grad(f.flat.size(), -(w + 1.0f));
      for (int p = 1; p <= kPushes; ++p) {
        for (int attempt = 0; attempt < 2; ++attempt) {
          ASSERT_TRUE(store->Push(w, p, ChunksOf(f, 0, grad)).ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  // Integers up to 4200 are exact in float32, so the sum is exact.
  const float expected = kPushes * (kWorkers * (kWorkers + 1) / 2.0f);
  std::vector<int64_t> versions;
  for (float x : Snapshot(*store, f, &versions)) ASSERT_EQ(x, expected);
  for (int64_t v : versions) EXPECT_EQ(v, kWorkers * kPushes);
  ShardStats s = store->Stats();
  EXPECT_EQ(s.pushes_applied, kWorkers * kPushes);
  EXPECT_EQ(s.pushes_duplicate, kWorkers * kPushes);
  EXPECT_GT(s.staleness_max, 0);
}

// A pull may keep a chunk's values (ChunkView::owner) and read them after
// the callback: pushes meanwhile write other buffers, never the held one.
TEST(ParameterStoreTest, HeldPullValuesStayUnchangedAcrossPushes) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1, "sgd", 1.0f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  struct Held {
    ChunkView view;
    std::vector<float> copy;  // What the view showed during the callback.
  };
  auto hold = [&] {
    std::vector<Held> held;
    EXPECT_TRUE(store
                    ->Pull({},
                           [&](const ChunkView& c) {
                             held.push_back(
                                 {c, std::vector<float>(c.data, c.data + c.num_elements)});
                           })
                    .ok());
    return held;
  };
  std::vector<float> grad(f.flat.size(), 1.0f);
  std::vector<Held> first = hold();  // Values v0.
  ASSERT_TRUE(store->Push(0, 1, ChunksOf(f, 0, grad)).ok());
  std::vector<Held> second = hold();  // Values v1; v0 still held.
  ASSERT_TRUE(store->Push(0, 2, ChunksOf(f, 0, grad)).ok());
  ASSERT_TRUE(store->Push(0, 3, ChunksOf(f, 0, grad)).ok());
  for (const std::vector<Held>* h : {&first, &second}) {
    for (const Held& c : *h) {
      ASSERT_NE(c.view.owner, nullptr);
      for (int64_t i = 0; i < c.view.num_elements; ++i) {
        ASSERT_EQ(c.view.data[i], c.copy[i]) << "chunk " << c.view.chunk_id;
      }
    }
  }
  // The updates all landed: v3 = v0 - 3, and the held v1 = v0 - 1.
  std::vector<int64_t> versions;
  std::vector<float> now = Snapshot(*store, f, &versions);
  for (const Held& c : second) {
    const Chunk& info = f.map.chunks[c.view.chunk_id];
    EXPECT_EQ(c.view.version, 1);
    for (int64_t i = 0; i < info.num_elements; ++i) {
      ASSERT_FLOAT_EQ(c.view.data[i], f.flat[info.flat_offset + i] - 1.0f);
      ASSERT_FLOAT_EQ(now[info.flat_offset + i], f.flat[info.flat_offset + i] - 3.0f);
    }
  }
  for (int64_t v : versions) EXPECT_EQ(v, 3);
  // Released, then pushed again: still exact (the spare buffers are reused).
  first.clear();
  second.clear();
  ASSERT_TRUE(store->Push(0, 4, ChunksOf(f, 0, grad)).ok());
  now = Snapshot(*store, f);
  for (size_t i = 0; i < now.size(); ++i) ASSERT_FLOAT_EQ(now[i], f.flat[i] - 4.0f);
}

// Readers that keep values while writers push: every held chunk is one
// consistent version (all its elements from the same update), never torn.
TEST(ParameterStoreTest, HeldValuesAreNeverTornByConcurrentPushes) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1, "sgd", 1.0f);
  std::vector<float> zeros(f.flat.size(), 0.0f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, zeros)).ok());
  std::atomic<bool> stop{false};
  absl::Notification reading;
  std::thread writer([&] {
    reading.WaitForNotification();
    std::vector<float> grad(f.flat.size(), -1.0f);
    for (int p = 1; p <= 300; ++p) EXPECT_TRUE(store->Push(0, p, ChunksOf(f, 0, grad)).ok());
    stop = true;
  });
  int64_t checked = 0;
  while (!stop) {
    if (!reading.HasBeenNotified()) reading.Notify();
    std::vector<ChunkView> held;
    ASSERT_TRUE(store->Pull({}, [&](const ChunkView& c) { held.push_back(c); }).ok());
    std::this_thread::yield();  // Let pushes land while we hold the values.
    for (const ChunkView& c : held) {
      // Each push adds 1 to every element: a chunk at version v is all v.
      for (int64_t i = 0; i < c.num_elements; ++i) {
        ASSERT_EQ(c.data[i], static_cast<float>(c.version)) << "chunk " << c.chunk_id;
      }
      ++checked;
    }
  }
  writer.join();
  EXPECT_GT(checked, 0);
}

// A gradient given as pieces (as the gRPC adapter passes a received
// message's slices) is applied exactly like the same bytes in one buffer,
// whatever the cut, in async and sync mode.
TEST(ParameterStoreTest, PushInPiecesEqualsContiguousPush) {
  Fixture f = MakeFixture(1);
  std::vector<float> grad(f.flat.size());
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = std::sin(0.37f * i);
  for (const char* opt : {"sgd", "momentum", "adagrad"}) {
    for (const std::vector<size_t>& cut :
         {std::vector<size_t>{1}, {3, 5, 7}, {4096 + 1}, {2, 16384}}) {
      auto a = NewStore(0, 1, opt, 0.1f);
      auto b = NewStore(0, 1, opt, 0.1f);
      ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
      std::vector<std::vector<absl::string_view>> storage;
      // Declared in pieces too.
      ASSERT_TRUE(b->Declare(f.layout, InPieces(ChunksOf(f, 0, f.flat), cut, &storage)).ok());
      for (int p = 1; p <= 2; ++p) {
        ASSERT_TRUE(a->Push(0, p, ChunksOf(f, 0, grad)).ok());
        auto r = b->Push(0, p, InPieces(ChunksOf(f, 0, grad), cut, &storage));
        ASSERT_TRUE(r.ok()) << r.status();
      }
      EXPECT_EQ(Snapshot(*a, f), Snapshot(*b, f)) << opt << " cut " << cut[0];
    }
  }
  // Sync mode keeps the step's gradient until all workers sent theirs.
  ParameterStoreOptions o;
  o.optimizer.name = "sgd";
  o.optimizer.learning_rate = 0.1f;
  o.mode = TrainMode::kSync;
  o.num_workers = 2;
  auto a = *ParameterStore::Create(o);
  auto b = *ParameterStore::Create(o);
  ASSERT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  ASSERT_TRUE(b->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  std::vector<std::vector<absl::string_view>> storage0, storage1;
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(a->Push(w, 1, ChunksOf(f, 0, grad)).ok());
  ASSERT_TRUE(b->Push(0, 1, InPieces(ChunksOf(f, 0, grad), {7}, &storage0)).ok());
  ASSERT_TRUE(b->Push(1, 1, InPieces(ChunksOf(f, 0, grad), {9, 2}, &storage1)).ok());
  std::vector<int64_t> va, vb;
  EXPECT_EQ(Snapshot(*a, f, &va), Snapshot(*b, f, &vb));
  EXPECT_EQ(va, vb);
  for (int64_t v : vb) EXPECT_EQ(v, 1);
}

TEST(ParameterStoreTest, BadPushInPiecesIsRejectedAndChangesNothing) {
  Fixture f = MakeFixture(1);
  auto store = NewStore(0, 1, "sgd", 1.0f);
  ASSERT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  const std::vector<float> before = Snapshot(*store, f);
  std::vector<std::vector<absl::string_view>> storage;
  // A NaN whose bytes straddle two pieces, in the last chunk.
  std::vector<float> grad(f.flat.size(), 1.0f);
  const Chunk& last = f.map.chunks[f.map.shard_chunks[0].back()];
  grad[last.flat_offset + last.num_elements / 2] = std::nanf("");
  auto r = store->Push(0, 1, InPieces(ChunksOf(f, 0, grad), {5}, &storage));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("NaN"), std::string::npos) << r.status();
  // Pieces that add up to fewer bytes than num_bytes says.
  grad.assign(f.flat.size(), 1.0f);
  std::vector<ChunkBytes> short_pieces = InPieces(ChunksOf(f, 0, grad), {8}, &storage);
  storage[0].pop_back();
  short_pieces[0].pieces = storage[0];
  r = store->Push(0, 2, short_pieces);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(Snapshot(*store, f), before);
}

TEST(ParameterStoreTest, CreateRejectsBadOptions) {
  ParameterStoreOptions o;
  o.shard_index = 2;
  o.num_shards = 2;
  EXPECT_FALSE(ParameterStore::Create(o).ok());
  o.shard_index = 0;
  o.optimizer.name = "nope";
  EXPECT_FALSE(ParameterStore::Create(o).ok());
}

TEST(ModeOptionsTest, RejectsInconsistentOptions) {
  ParameterStoreOptions o;
  o.mode = TrainMode::kSync;
  EXPECT_FALSE(ParameterStore::Create(o).ok());  // no num_workers
  o.num_workers = 2;
  o.replicas_to_aggregate = 3;
  EXPECT_FALSE(ParameterStore::Create(o).ok());
  o.replicas_to_aggregate = 0;
  o.staleness_aware = true;
  EXPECT_FALSE(ParameterStore::Create(o).ok());
  o.staleness_aware = false;
  EXPECT_TRUE(ParameterStore::Create(o).ok());
  EXPECT_FALSE(ParseTrainMode("bsp").ok());
}
}  // namespace
}  // namespace downpour
