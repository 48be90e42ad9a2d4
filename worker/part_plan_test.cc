#include "worker/part_plan.h"

#include <vector>

#include "gtest/gtest.h"
#include "worker/shard_map_test_util.h"

namespace downpour {
namespace {

std::vector<std::vector<int32_t>> ChunksOf(const std::vector<Part>& parts) {
  std::vector<std::vector<int32_t>> out;
  for (const Part& p : parts) out.push_back(p.chunk_ids);
  return out;
}

TEST(PartPlanTest, ChunksAreGroupedInOrderUpToPartBytes) {
  // 4096-byte parts: 512 + 512 floats fill one exactly; the next starts anew.
  const ShardMap m = MapOf({{512, 512, 100, 900, 24}});
  const std::vector<Part> parts = PlanParts(m, 4096, 1);
  EXPECT_EQ(ChunksOf(parts),
            (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3, 4}}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(parts[i].shard, 0);
    EXPECT_EQ(parts[i].index, i);
    EXPECT_EQ(parts[i].count, 2);
    EXPECT_EQ(parts[i].conn, 0);
  }
}

TEST(PartPlanTest, AChunkLargerThanAPartTravelsAlone) {
  const ShardMap m = MapOf({{10, 5000, 10}});
  EXPECT_EQ(ChunksOf(PlanParts(m, 4096, 1)),
            (std::vector<std::vector<int32_t>>{{0}, {1}, {2}}));
}

TEST(PartPlanTest, AShardWithoutChunksStillGetsAPart) {
  const ShardMap m = MapOf({{10}, {}, {20}});
  const std::vector<Part> parts = PlanParts(m, 4096, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shard, 1);
  EXPECT_TRUE(parts[1].chunk_ids.empty());
  EXPECT_EQ(parts[1].index, 0);
  EXPECT_EQ(parts[1].count, 1);
}

TEST(PartPlanTest, PartsAreDealtOverConnectionsAndLanesAreDistinct) {
  // Five parts on shard 0, two on shard 1, three connections each.
  const ShardMap m = MapOf({{1024, 1024, 1024, 1024, 1024}, {1024, 1024}});
  const std::vector<Part> parts = PlanParts(m, 4096, 3);
  ASSERT_EQ(parts.size(), 7u);
  const std::vector<int> conn = {0, 1, 2, 0, 1, 0, 1};
  const std::vector<int> lane = {0, 1, 2, 0, 1, 3, 4};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(parts[i].conn, conn[i]) << i;
    EXPECT_EQ(LaneOf(parts[i], 3), lane[i]) << i;
    EXPECT_EQ(parts[i].count, i < 5 ? 5 : 2) << i;
    EXPECT_EQ(parts[i].index, i < 5 ? i : i - 5) << i;
  }
}

TEST(PartPlanTest, EveryChunkOnceWithinTheBoundOfAComputedMap) {
  ModelLayout layout;
  layout.tensors = {{"w", {300, 70}}, {"b", {70}}, {"v", {5000}}, {"s", {}}};
  layout.num_shards = 3;
  layout.max_chunk_bytes = 8192;
  auto map = ComputeShardMap(layout);
  ASSERT_TRUE(map.ok()) << map.status();
  constexpr int64_t kPartBytes = 20000;
  const std::vector<Part> parts = PlanParts(*map, kPartBytes, 2);
  std::vector<int> seen(map->chunks.size(), 0);
  int last_shard = 0;
  for (const Part& p : parts) {
    EXPECT_GE(p.shard, last_shard);  // Shard order.
    last_shard = p.shard;
    int64_t bytes = 0;
    int32_t prev = -1;
    for (int32_t id : p.chunk_ids) {
      EXPECT_EQ(map->chunks[id].shard, p.shard);
      EXPECT_GT(id, prev);  // The shard's order.
      prev = id;
      ++seen[id];
      bytes += map->chunks[id].num_elements * 4;
    }
    if (p.chunk_ids.size() > 1) {
      EXPECT_LE(bytes, kPartBytes);
    }
  }
  for (size_t id = 0; id < seen.size(); ++id) EXPECT_EQ(seen[id], 1) << id;
}

TEST(PartPlanTest, PushEndCarriesAPullInAShardsOneLastPart) {
  // Shard 0: both parts sent. Shard 1: one of two left. Shard 2: two left.
  // Shard 3: one left, its sent part acknowledged by an older process.
  // Shard 4: one left, but its pull takes two parts. Shard 5: one left,
  // the shard's process not known yet. Shard 6: both sent, one of them
  // acknowledged by an older process.
  const std::vector<Part> parts =
      PartsOfShards({0, 0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 6});
  const std::vector<Part> pulls = PartsOfShards({0, 1, 2, 3, 4, 4, 5, 6});
  const std::vector<bool> sent = {true,  true,  true,  false, false, false,
                                  true,  false, false, false, true,  true};
  const std::vector<uint64_t> acked_by = {7, 7, 8, 0, 0, 0, 5, 0, 0, 0, 3, 4};
  const std::vector<uint64_t> current = {7, 8, 9, 6, 10, 0, 4};
  PushEnd e = PlanPushEnd(parts, pulls, sent, acked_by, current,
                          /*waits_for_step=*/true);
  using P = PushEndPull;
  EXPECT_EQ(e.how, (std::vector<P>{P::kNow, P::kCarried, P::kAfter, P::kAfter,
                                   P::kAfter, P::kAfter, P::kAfter}));
  EXPECT_EQ(e.pull_part, (std::vector<int>{0, 1, 2, 3, -1, 6, 7}));

  // A pull that waits for no step is always sent after the push.
  e = PlanPushEnd(parts, pulls, sent, acked_by, current,
                  /*waits_for_step=*/false);
  for (P how : e.how) EXPECT_EQ(how, P::kAfter);
}

}  // namespace
}  // namespace downpour
