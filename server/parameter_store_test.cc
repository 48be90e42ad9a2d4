#include "server/parameter_store.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

ModelLayout TestLayout(int shards) {
  ModelLayout l;
  l.tensors = {{"a", {64, 300}}, {"b", {7}}, {"c", {3, 5}}};
  l.num_shards = shards;
  l.max_chunk_bytes = 16 << 10;   // forces "a" into several chunks
  l.spread_min_bytes = 4 << 10;
  return l;
}

struct Fixture {
  ModelLayout layout;
  ShardMap map;
  std::vector<float> flat;  // the whole model
};

Fixture MakeFixture(int shards) {
  Fixture f;
  f.layout = TestLayout(shards);
  f.map = *ComputeShardMap(f.layout);
  f.flat.resize(f.map.total_elements);
  for (size_t i = 0; i < f.flat.size(); ++i) f.flat[i] = 0.001f * i;
  return f;
}

std::vector<ChunkBytes> ChunksOf(const Fixture& f, int shard,
                                 const std::vector<float>& flat) {
  std::vector<ChunkBytes> out;
  for (int32_t id : f.map.shard_chunks[shard]) {
    const Chunk& c = f.map.chunks[id];
    out.push_back({id, 0, flat.data() + c.flat_offset, c.num_elements * 4});
  }
  return out;
}

std::unique_ptr<ParameterStore> NewStore(int shard, int shards,
                                         const std::string& opt = "sgd",
                                         float lr = 1.0f) {
  ParameterStoreOptions o;
  o.shard_index = shard;
  o.num_shards = shards;
  o.optimizer.name = opt;
  o.optimizer.learning_rate = lr;
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// The shard's values gathered into a flat model-sized vector (other shards'
// positions left at 0), plus the versions by chunk id.
std::vector<float> Snapshot(ParameterStore& store, const Fixture& f,
                            std::vector<int64_t>* versions = nullptr) {
  std::vector<float> flat(f.flat.size(), 0.0f);
  if (versions) versions->assign(f.map.chunks.size(), -1);
  EXPECT_TRUE(store
                  .Pull({},
                        [&](const ChunkView& c) {
                          const Chunk& info = f.map.chunks[c.chunk_id];
                          std::copy(c.data, c.data + c.num_elements,
                                    flat.begin() + info.flat_offset);
                          if (versions) (*versions)[c.chunk_id] = c.version;
                        })
                  .ok());
  return flat;
}

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

TEST(ParameterStoreTest, BadInitialValuesLeaveStoreUninitialized) {
  Fixture f = MakeFixture(2);
  auto store = NewStore(0, 2);
  std::vector<ChunkBytes> init = ChunksOf(f, 0, f.flat);
  init.pop_back();
  EXPECT_FALSE(store->Declare(f.layout, init).ok());
  std::vector<float> bad = f.flat;
  bad[f.map.chunks[f.map.shard_chunks[0][0]].flat_offset] = NAN;
  EXPECT_FALSE(store->Declare(f.layout, ChunksOf(f, 0, bad)).ok());
  EXPECT_FALSE(store->Stats().initialized);
  // A correct declaration still works afterwards.
  EXPECT_TRUE(store->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
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

TEST(ParameterStoreTest, CreateRejectsBadOptions) {
  ParameterStoreOptions o;
  o.shard_index = 2;
  o.num_shards = 2;
  EXPECT_FALSE(ParameterStore::Create(o).ok());
  o.shard_index = 0;
  o.optimizer.name = "nope";
  EXPECT_FALSE(ParameterStore::Create(o).ok());
}

}  // namespace
}  // namespace downpour
