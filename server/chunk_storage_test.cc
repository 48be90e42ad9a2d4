#include "server/chunk_storage.h"

#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

std::unique_ptr<Optimizer> Sgd(float lr) {
  OptimizerOptions o;
  o.name = "sgd";
  o.learning_rate = lr;
  return *CreateOptimizer(o);
}

Chunk Info(int32_t id, int64_t n) {
  Chunk c;
  c.id = id;
  c.num_elements = n;
  return c;
}

ChunkBytes BytesOf(const std::vector<float>& v, int64_t base = 0) {
  return ChunkBytes{0, base, v.data(), static_cast<int64_t>(v.size() * 4), {}};
}

std::vector<float> ReadAll(const ChunkState& c, int64_t* version = nullptr) {
  std::vector<float> out;
  c.Read([&](const ChunkView& v) {
    out.assign(v.data, v.data + v.num_elements);
    if (version != nullptr) *version = v.version;
  });
  return out;
}

TEST(ChunkStateTest, InitializeOnceThenReadAtVersionZero) {
  auto opt = Sgd(1.0f);
  ChunkState c(Info(3, 4));
  std::vector<float> init = {1, 2, 3, 4}, other(4, 9.0f);
  EXPECT_TRUE(c.Initialize(BytesOf(init), *opt));
  EXPECT_FALSE(c.Initialize(BytesOf(other), *opt));
  int64_t version = -1;
  EXPECT_EQ(ReadAll(c, &version), init);
  EXPECT_EQ(version, 0);
  c.Read([](const ChunkView& v) { EXPECT_EQ(v.chunk_id, 3); });
}

TEST(ChunkStateTest, HeldValuesStayUnchangedWhileUpdatesGoToANewBuffer) {
  auto opt = Sgd(1.0f);
  ChunkState c(Info(0, 3));
  ASSERT_TRUE(c.Initialize(BytesOf({10, 20, 30}), *opt));
  ChunkView held;
  c.Read([&](const ChunkView& v) { held = v; });
  int64_t staleness = -1;
  std::vector<float> grad = {1, 1, 1};
  ASSERT_TRUE(c.ApplyGradient(BytesOf(grad), *opt, StalenessRule(), &staleness));
  EXPECT_EQ(staleness, 0);
  ASSERT_TRUE(c.ApplyGradient(BytesOf(grad), *opt, StalenessRule(), &staleness));
  EXPECT_EQ(staleness, 1);  // Computed from version 0, applied at 1.
  EXPECT_EQ(std::vector<float>(held.data, held.data + 3),
            (std::vector<float>{10, 20, 30}));
  int64_t version = -1;
  EXPECT_EQ(ReadAll(c, &version), (std::vector<float>{8, 18, 28}));
  EXPECT_EQ(version, 2);
  EXPECT_EQ(c.version(), 2);
  // Released: later updates reuse the buffers in place and stay exact.
  held = ChunkView();
  ASSERT_TRUE(c.ApplyGradient(BytesOf(grad, 2), *opt, StalenessRule(), &staleness));
  EXPECT_EQ(ReadAll(c), (std::vector<float>{7, 17, 27}));
}

TEST(ChunkStateTest, StalenessRuleScalesAndDrops) {
  auto opt = Sgd(1.0f);
  ChunkState c(Info(0, 2));
  ASSERT_TRUE(c.Initialize(BytesOf({0, 0}), *opt));
  StalenessRule rule;
  rule.staleness_aware = true;
  rule.drop_threshold = 2;
  std::vector<float> g = {1, 1};
  int64_t s = -1;
  ASSERT_TRUE(c.ApplyGradient(BytesOf(g), *opt, rule, &s));  // s 0: scale 1
  ASSERT_TRUE(c.ApplyGradient(BytesOf(g), *opt, rule, &s));  // s 1: scale 1
  ASSERT_TRUE(c.ApplyGradient(BytesOf(g), *opt, rule, &s));  // s 2: scale 1/2
  EXPECT_EQ(s, 2);
  EXPECT_FALSE(c.ApplyGradient(BytesOf(g), *opt, rule, &s));  // s 3: dropped
  EXPECT_EQ(s, 3);
  EXPECT_EQ(c.version(), 3);
  EXPECT_EQ(ReadAll(c), (std::vector<float>{-2.5f, -2.5f}));
}

TEST(ChunkStateTest, ApplyDenseSetsTheGivenVersion) {
  OptimizerOptions o;
  o.name = "momentum";
  o.learning_rate = 0.5f;
  auto opt = *CreateOptimizer(o);
  ChunkState c(Info(0, 2));
  ASSERT_TRUE(c.Initialize(BytesOf({1, 1}), *opt));
  const float sum[] = {4, 8};
  c.ApplyDense(sum, 0.5f, *opt, 7);
  EXPECT_EQ(c.version(), 7);
  // Momentum from zero velocity: v = g * scale, p -= lr * v.
  EXPECT_EQ(ReadAll(c), (std::vector<float>{0, -1}));
}

TEST(ShardChunksTest, LocalOrderIndexAndOffsets) {
  ModelLayout l;
  l.tensors = {{"a", {64, 300}}, {"b", {7}}, {"c", {3, 5}}};
  l.num_shards = 2;
  l.max_chunk_bytes = 16 << 10;
  l.spread_min_bytes = 4 << 10;
  const ShardMap map = *ComputeShardMap(l);
  for (int32_t shard = 0; shard < 2; ++shard) {
    ShardChunks chunks = ShardChunks::ForShard(map, shard);
    const std::vector<int32_t>& ids = map.shard_chunks[shard];
    ASSERT_EQ(chunks.size(), ids.size());
    int64_t offset = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(chunks.LocalIndex(ids[i]), static_cast<int>(i));
      EXPECT_EQ(chunks.at(i).info().id, ids[i]);
      EXPECT_EQ(chunks.offset(i), offset);
      offset += map.chunks[ids[i]].num_elements;
    }
    EXPECT_EQ(chunks.total_elements(), offset);
    EXPECT_EQ(chunks.total_elements(), map.shard_elements[shard]);
    for (int32_t other : map.shard_chunks[1 - shard]) {
      EXPECT_EQ(chunks.LocalIndex(other), -1);
    }
  }
  ShardChunks empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.LocalIndex(0), -1);
  EXPECT_EQ(ShardChunks::ForShard(map, 0).LocalIndex(-1), -1);
  EXPECT_EQ(ShardChunks::ForShard(map, 0).LocalIndex(1 << 30), -1);
}

}  // namespace
}  // namespace downpour
