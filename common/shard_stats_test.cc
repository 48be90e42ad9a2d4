#include "common/shard_stats.h"

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(ShardStatsTest, JsonOfDefaults) {
  EXPECT_EQ(ShardStatsToJson(ShardStats()),
            "{\"shard\":0,\"num_shards\":0,\"initialized\":false,\"chunks\":0,"
            "\"elements\":0,\"pulls\":0,\"pushes_applied\":0,"
            "\"pushes_duplicate\":0,\"rejected\":{},\"staleness_mean\":0.0000,"
            "\"staleness_max\":0,\"chunk_updates\":0,\"bytes_pulled\":0,"
            "\"bytes_pushed\":0,\"optimizer\":\"\",\"mode\":\"\","
            "\"staleness_p50\":0,\"staleness_p99\":0,\"dropped_stale\":0,"
            "\"steps\":0,\"ssp_max_lead\":0,\"evicted_workers\":[],"
            "\"aborted\":false,\"last_snapshot_unix_s\":0,"
            "\"snapshots_written\":0,\"snapshots_failed\":0}");
}

TEST(ShardStatsTest, JsonOfEveryField) {
  ShardStats s;
  s.shard_index = 1;
  s.num_shards = 2;
  s.initialized = true;
  s.num_chunks = 3;
  s.num_elements = int64_t{1} << 40;
  s.pulls = 5;
  s.pushes_applied = 6;
  s.pushes_duplicate = 7;
  s.rejected = {{"wrong_size", 2}, {"non_finite", 1}};
  s.staleness_mean = 1.23456;
  s.staleness_max = 9;
  s.total_chunk_updates = 10;
  s.bytes_pulled = 11;
  s.bytes_pushed = 12;
  s.optimizer = "adagrad";
  s.mode = "ssp";
  s.staleness_p50 = 13;
  s.staleness_p99 = 14;
  s.dropped_stale = 15;
  s.steps = 16;
  s.ssp_max_lead = 17;
  s.evicted_workers = {3, 1};
  s.aborted = "too few workers";
  s.last_snapshot_unix_s = 1700000000;
  s.snapshots_written = 18;
  s.snapshots_failed = 19;
  EXPECT_EQ(ShardStatsToJson(s),
            "{\"shard\":1,\"num_shards\":2,\"initialized\":true,\"chunks\":3,"
            "\"elements\":1099511627776,\"pulls\":5,\"pushes_applied\":6,"
            "\"pushes_duplicate\":7,"
            "\"rejected\":{\"non_finite\":1,\"wrong_size\":2},"
            "\"staleness_mean\":1.2346,\"staleness_max\":9,"
            "\"chunk_updates\":10,\"bytes_pulled\":11,\"bytes_pushed\":12,"
            "\"optimizer\":\"adagrad\",\"mode\":\"ssp\",\"staleness_p50\":13,"
            "\"staleness_p99\":14,\"dropped_stale\":15,\"steps\":16,"
            "\"ssp_max_lead\":17,\"evicted_workers\":[3,1],\"aborted\":true,"
            "\"last_snapshot_unix_s\":1700000000,\"snapshots_written\":18,"
            "\"snapshots_failed\":19}");
}

}  // namespace
}  // namespace downpour
