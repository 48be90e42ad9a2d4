#include "common/sharding.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

ModelLayout CnnLayout(int shards) {
  ModelLayout l;
  l.tensors = {{"conv1.weight", {32, 1, 3, 3}}, {"conv1.bias", {32}},
               {"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}},
               {"fc1.weight", {128, 1600}},      {"fc1.bias", {128}},
               {"fc2.weight", {10, 128}},        {"fc2.bias", {10}}};
  l.num_shards = shards;
  return l;
}

TEST(ShardingTest, ChunksCoverFlatVectorContiguously) {
  for (int s : {1, 2, 3, 4, 7}) {
    auto map = ComputeShardMap(CnnLayout(s));
    ASSERT_TRUE(map.ok()) << map.status();
    int64_t expected_offset = 0;
    for (const Chunk& c : map->chunks) {
      EXPECT_EQ(c.flat_offset, expected_offset);
      EXPECT_GE(c.num_elements, 1);
      EXPECT_LE(c.num_elements * 4, CnnLayout(s).max_chunk_bytes);
      EXPECT_GE(c.shard, 0);
      EXPECT_LT(c.shard, s);
      expected_offset += c.num_elements;
    }
    EXPECT_EQ(expected_offset, CnnLayout(s).NumElements());
    EXPECT_EQ(map->total_elements, 225034);
    int64_t sum = 0;
    for (int64_t e : map->shard_elements) sum += e;
    EXPECT_EQ(sum, map->total_elements);
  }
}

TEST(ShardingTest, LargeTensorsSpreadOverAllShards) {
  for (int s : {2, 4}) {
    auto map = ComputeShardMap(CnnLayout(s));
    ASSERT_TRUE(map.ok());
    std::vector<bool> holds_fc1(s, false);
    for (const Chunk& c : map->chunks) {
      if (c.tensor_index == 4) holds_fc1[c.shard] = true;  // fc1.weight
    }
    for (int k = 0; k < s; ++k) EXPECT_TRUE(holds_fc1[k]) << "shard " << k;
  }
}

TEST(ShardingTest, BalancedByBytes) {
  for (int s : {2, 3, 4}) {
    auto map = ComputeShardMap(CnnLayout(s));
    ASSERT_TRUE(map.ok());
    const auto [lo, hi] = std::minmax_element(map->shard_elements.begin(),
                                              map->shard_elements.end());
    // Greedy largest-first packing leaves the shards at most one chunk apart,
    // and here within 5% of the mean.
    int64_t largest = 0;
    for (const Chunk& c : map->chunks) largest = std::max(largest, c.num_elements);
    EXPECT_LE(*hi - *lo, largest) << "shards " << s;
    const double mean = static_cast<double>(map->total_elements) / s;
    EXPECT_LE((*hi - *lo) / mean, 0.05) << "shards " << s;
  }
}

TEST(ShardingTest, SmallTensorsStayWhole) {
  auto map = ComputeShardMap(CnnLayout(4));
  ASSERT_TRUE(map.ok());
  int bias_chunks = 0;
  for (const Chunk& c : map->chunks) {
    if (c.tensor_index == 1 || c.tensor_index == 3 || c.tensor_index == 7) {
      ++bias_chunks;
    }
  }
  EXPECT_EQ(bias_chunks, 3);
}

TEST(ShardingTest, MaxChunkBytesSplitsBigTensors) {
  ModelLayout l;
  l.tensors = {{"big", {1000, 1001}}};  // 4,004,000 bytes
  l.max_chunk_bytes = 1 << 20;
  l.num_shards = 2;
  auto map = ComputeShardMap(l);
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->chunks.size(), 4u);
  for (const Chunk& c : map->chunks) EXPECT_LE(c.num_elements * 4, 1 << 20);
  EXPECT_EQ(map->shard_elements[0], map->shard_elements[1]);
}

TEST(ShardingTest, DeterministicAndIndependentOfCallOrder) {
  auto a = ComputeShardMap(CnnLayout(3));
  auto other = ComputeShardMap(CnnLayout(5));
  auto b = ComputeShardMap(CnnLayout(3));
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_EQ(a->chunks.size(), b->chunks.size());
  for (size_t i = 0; i < a->chunks.size(); ++i) {
    EXPECT_EQ(a->chunks[i].shard, b->chunks[i].shard);
    EXPECT_EQ(a->chunks[i].flat_offset, b->chunks[i].flat_offset);
    EXPECT_EQ(a->chunks[i].num_elements, b->chunks[i].num_elements);
  }
  EXPECT_EQ(a->shard_chunks, b->shard_chunks);
}

TEST(ShardingTest, EmptyAndScalarTensors) {
  ModelLayout l;
  l.tensors = {{"empty", {0, 5}}, {"scalar", {}}, {"one", {1}}};
  l.num_shards = 2;
  auto map = ComputeShardMap(l);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->chunks.size(), 3u);
  EXPECT_EQ(map->chunks[0].num_elements, 0);
  EXPECT_EQ(map->chunks[1].num_elements, 1);
  EXPECT_EQ(map->total_elements, 2);
}

TEST(ShardingTest, RejectsBadLayouts) {
  ModelLayout l = CnnLayout(0);
  EXPECT_EQ(ComputeShardMap(l).status().code(),
            absl::StatusCode::kInvalidArgument);
  l = CnnLayout(2);
  l.tensors.push_back({"conv1.bias", {3}});
  EXPECT_NE(ComputeShardMap(l).status().message().find("twice"),
            std::string::npos);
  l = CnnLayout(2);
  l.tensors[0].shape = {-1};
  EXPECT_FALSE(ComputeShardMap(l).ok());
  l = CnnLayout(2);
  l.tensors.clear();
  EXPECT_FALSE(ComputeShardMap(l).ok());
}


// The message of a refused layout, for checking that it names the limit.
std::string Refusal(const ModelLayout& l) {
  absl::StatusOr<ShardMap> map = ComputeShardMap(l);
  if (map.ok()) return "accepted with " + std::to_string(map->chunks.size()) +
                       " chunks";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(map.status().message());
}

ModelLayout OneTensor(std::vector<int64_t> shape) {
  ModelLayout l;
  l.tensors = {{"w", std::move(shape)}};
  return l;
}

// Shapes whose element count overflows 64 bits, or that no server could
// hold, are refused with the limit named (they used to be accepted with
// wrapped sizes: [2^32, 2^32] as 0 floats, [3, 2^62] as a negative count).
TEST(ShardingTest, RefusesAbsurdShapesNamingTheLimit) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{int64_t{1} << 33},
                                         {int64_t{1} << 40},
                                         {int64_t{1} << 32, int64_t{1} << 32},
                                         {3, int64_t{1} << 62},
                                         {kMax},
                                         {kMax, kMax, 0},
                                         {int64_t{1} << 31, int64_t{1} << 31}}) {
    const std::string why = Refusal(OneTensor(shape));
    EXPECT_NE(why.find("max_total_elements"), std::string::npos) << why;
    EXPECT_NE(why.find("'w'"), std::string::npos) << why;
  }
  // The total over tensors counts, not just each tensor.
  ModelLayout two = OneTensor({int64_t{1} << 31});
  two.tensors.push_back({"v", {int64_t{1} << 31}});
  two.tensors.push_back({"u", {1}});
  EXPECT_NE(Refusal(two).find("max_total_elements"), std::string::npos);
  // Exactly at the limit is fine (layout only: nothing is allocated for
  // values here).
  ModelLayout at_limit = OneTensor({int64_t{1} << 16, int64_t{1} << 16});
  auto map = ComputeShardMap(at_limit);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->total_elements, int64_t{1} << 32);
  // Zero dimensions stay allowed, whatever the others are (below the limit).
  EXPECT_TRUE(ComputeShardMap(OneTensor({0, int64_t{1} << 30, 7})).ok());
  EXPECT_NE(Refusal(OneTensor({4, -2})).find("negative"), std::string::npos);
}

// Found by layout_fuzzer: dimensions whose product overflows, followed by a
// zero, are a valid empty tensor; the element count must say 0 (it said
// INT64_MAX, and ComputeShardMap then asked for that many chunks).
TEST(ShardingTest, ZeroDimensionAfterHugeOnesIsAnEmptyTensor) {
  const std::vector<int64_t> shape = {int64_t{1} << 32, int64_t{1} << 32, 0, 0};
  ModelLayout layout = OneTensor(shape);
  layout.max_chunk_bytes = 4;
  EXPECT_EQ(layout.tensors[0].NumElements(), 0);
  EXPECT_EQ(layout.NumElements(), 0);
  auto map = ComputeShardMap(layout);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->total_elements, 0);
  EXPECT_EQ(map->chunks.size(), 1u);
}

TEST(ShardingTest, RefusesTooManyTensorsDimensionsChunksOrShards) {
  ModelLayout many;
  for (int i = 0; i <= (1 << 16); ++i) {
    many.tensors.push_back({"t" + std::to_string(i), {1}});
  }
  EXPECT_NE(Refusal(many).find("max_tensors"), std::string::npos);
  EXPECT_NE(Refusal(OneTensor(std::vector<int64_t>(33, 1))).find("max_rank"),
            std::string::npos);
  // 4-byte chunks of a 2^19-element tensor: 2^19 chunks.
  ModelLayout tiny_chunks = OneTensor({int64_t{1} << 19});
  tiny_chunks.max_chunk_bytes = 4;
  EXPECT_NE(Refusal(tiny_chunks).find("max_chunks"), std::string::npos);
  ModelLayout shards = CnnLayout(100000);
  EXPECT_NE(Refusal(shards).find("max_shards"), std::string::npos);
}

TEST(ShardingTest, MaxChunkBytesMustBeAPositiveMultipleOfFourAndBounded) {
  for (int64_t bytes : {int64_t{0}, int64_t{-4}, int64_t{2}, int64_t{6},
                        int64_t{1023}, (int64_t{1} << 30) + 4,
                        std::numeric_limits<int64_t>::max()}) {
    ModelLayout l = CnnLayout(2);
    l.max_chunk_bytes = bytes;
    EXPECT_NE(Refusal(l).find("max_chunk_bytes"), std::string::npos) << bytes;
  }
  ModelLayout l = CnnLayout(2);
  l.max_chunk_bytes = int64_t{1} << 30;
  EXPECT_TRUE(ComputeShardMap(l).ok());
  l.max_chunk_bytes = 4;
  EXPECT_TRUE(ComputeShardMap(l).ok());  // 225,034 chunks: within the limit.
}


TEST(ShardingTest, LimitsAreOptionsAndAreThemselvesChecked) {
  LayoutLimits limits;
  limits.max_tensors = 7;
  EXPECT_NE(ComputeShardMap(CnnLayout(2), limits).status().message().find(
                "max_tensors = 7"),
            std::string::npos);
  limits = LayoutLimits();
  limits.max_total_elements = 225034;  // CnnLayout's exact size.
  EXPECT_TRUE(ComputeShardMap(CnnLayout(2), limits).ok());
  limits.max_total_elements = 225033;
  EXPECT_FALSE(ComputeShardMap(CnnLayout(2), limits).ok());
  limits = LayoutLimits();
  limits.max_chunks = 8;  // One chunk a tensor with 1 shard.
  EXPECT_TRUE(ComputeShardMap(CnnLayout(1), limits).ok());
  EXPECT_FALSE(ComputeShardMap(CnnLayout(2), limits).ok());  // fc1 spread
  limits = LayoutLimits();
  limits.max_chunks = int64_t{1} << 31;
  EXPECT_FALSE(ValidateLayoutLimits(limits).ok());
  EXPECT_FALSE(ComputeShardMap(CnnLayout(2), limits).ok());
  EXPECT_TRUE(ValidateLayoutLimits(LayoutLimits()).ok());
}

// fashion_cnn with conv2's weight gradient deferred: conv2 leads, then
// conv1; the two blocks are pinned to shards 0 and 1, whole.
TEST(ShardingTest, PinnedBlocksGoWholeToTheirShards) {
  ModelLayout l;
  l.tensors = {{"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}},
               {"conv1.weight", {32, 1, 3, 3}},  {"conv1.bias", {32}},
               {"fc1.weight", {128, 1600}},      {"fc1.bias", {128}},
               {"fc2.weight", {10, 128}},        {"fc2.bias", {10}}};
  l.num_shards = 2;
  auto plain = ComputeShardMap(l);
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Unpinned, conv2's 72 KiB of weights are spread over both shards.
  int conv2_chunks = 0;
  for (const Chunk& c : plain->chunks) conv2_chunks += c.tensor_index == 0;
  EXPECT_EQ(conv2_chunks, 2);

  l.pinned_blocks = {2, 2};
  auto map = ComputeShardMap(l);
  ASSERT_TRUE(map.ok()) << map.status();
  std::vector<std::vector<int>> shards_of(l.tensors.size());
  for (const Chunk& c : map->chunks) {
    shards_of[c.tensor_index].push_back(c.shard);
  }
  EXPECT_EQ(shards_of[0], std::vector<int>{0});  // conv2, whole.
  EXPECT_EQ(shards_of[1], std::vector<int>{0});
  EXPECT_EQ(shards_of[2], std::vector<int>{1});  // conv1.
  EXPECT_EQ(shards_of[3], std::vector<int>{1});
  EXPECT_EQ(shards_of[4], (std::vector<int>{1, 0}));  // fc1, spread.
  // Every chunk on exactly one shard, the loads summing to the model.
  int64_t placed = 0;
  for (int s = 0; s < 2; ++s) {
    for (int id : map->shard_chunks[s]) {
      EXPECT_EQ(map->chunks[id].shard, s);
      placed += map->chunks[id].num_elements;
    }
  }
  EXPECT_EQ(placed, l.NumElements());
  EXPECT_EQ(map->shard_elements[0] + map->shard_elements[1], l.NumElements());

  // Three blocks on two shards: the third goes to shard 0 again; one shard
  // takes every block.
  l.pinned_blocks = {1, 1, 2};
  map = ComputeShardMap(l);
  ASSERT_TRUE(map.ok()) << map.status();
  for (const Chunk& c : map->chunks) {
    if (c.tensor_index == 2 || c.tensor_index == 3) EXPECT_EQ(c.shard, 0);
    if (c.tensor_index == 1) EXPECT_EQ(c.shard, 1);
  }
  l.num_shards = 1;
  EXPECT_TRUE(ComputeShardMap(l).ok());
}

TEST(ShardingTest, RefusesPinnedBlocksBeyondTheTensors) {
  ModelLayout l = CnnLayout(2);
  l.pinned_blocks = {1, 0};
  EXPECT_EQ(ComputeShardMap(l).status().code(),
            absl::StatusCode::kInvalidArgument);
  l.pinned_blocks = {static_cast<int32_t>(l.tensors.size()), 1};
  absl::Status s = ComputeShardMap(l).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pinned_blocks"), std::string::npos) << s;
  l.pinned_blocks = {-3};
  EXPECT_EQ(ComputeShardMap(l).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelLayout a = CnnLayout(2), b = CnnLayout(2);
  b.pinned_blocks = {2};
  EXPECT_NE(a, b);
  EXPECT_EQ(LayoutDifference(a, b), "pinned_blocks [] vs [2]");
}

TEST(ShardingTest, LayoutDifferenceNamesTheFirstDifference) {
  ModelLayout a;
  a.tensors = {{"b", {3}}, {"w", {4, 8}}};
  ModelLayout b = a;
  EXPECT_EQ(LayoutDifference(a, b), "");
  b.tensors[1].shape = {8, 4};
  EXPECT_EQ(LayoutDifference(a, b), "tensor 1 'w': shape [4,8] vs [8,4]");
  b = a;
  b.tensors[0].name = "c";
  EXPECT_EQ(LayoutDifference(a, b), "tensor 0: name 'b' vs 'c'");
  b = a;
  b.tensors.pop_back();
  EXPECT_EQ(LayoutDifference(a, b), "2 tensors vs 1");
  b = a;
  b.num_shards = 3;
  EXPECT_EQ(LayoutDifference(a, b), "num_shards 1 vs 3");
  b = a;
  b.tensors[1].shape.assign(100, 1);
  b.tensors[1].name.assign(1000, 'x');
  const std::string long_diff = LayoutDifference(a, b);
  EXPECT_LT(long_diff.size(), 200u) << long_diff;
  b.tensors[1].name = "w";
  EXPECT_NE(LayoutDifference(a, b).find("(rank 100)"), std::string::npos);
}

}  // namespace
}  // namespace downpour
