#include "rpc/rpc_convert.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(RpcConvertTest, StatusRoundTripsWithItsCodeAndNamesTheCall) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status g = ToGrpcStatus(absl::InvalidArgumentError("bad chunk"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "bad chunk");
  const absl::Status back = FromGrpcStatus(g, "Push to 127.0.0.1:5000");
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.message(), "Push to 127.0.0.1:5000: bad chunk");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "x").ok());
}

TEST(RpcConvertTest, LayoutRoundTrips) {
  ModelLayout l;
  l.tensors = {{"w", {3, 4}}, {"scalar", {}}};
  l.max_chunk_bytes = 1024;
  l.num_shards = 3;
  l.spread_min_bytes = 64;
  proto::ModelLayout p;
  LayoutToProto(l, &p);
  const ModelLayout back = LayoutFromProto(p);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].name, "w");
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(back.tensors[1].shape.empty());
  EXPECT_EQ(back.max_chunk_bytes, 1024);
  EXPECT_EQ(back.num_shards, 3);
  EXPECT_EQ(back.spread_min_bytes, 64);
  EXPECT_TRUE(back.pinned_blocks.empty());
  l.pinned_blocks = {1, 1};
  LayoutToProto(l, &p);
  EXPECT_EQ(LayoutFromProto(p), l);
}

TEST(RpcConvertTest, StatsRoundTripEveryField) {
  ShardStats s;
  s.shard_index = 1;
  s.num_shards = 2;
  s.initialized = true;
  s.num_chunks = 3;
  s.num_elements = 4;
  s.pulls = 5;
  s.pushes_applied = 6;
  s.pushes_duplicate = 7;
  s.rejected = {{"wrong_size", 2}, {"non_finite", 1}};
  s.staleness_mean = 1.5;
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
  proto::StatsResponse p;
  StatsToProto(s, &p);
  EXPECT_EQ(p.shard_index(), 1);
  EXPECT_EQ(p.total_chunk_updates(), 10);
  EXPECT_EQ(p.rejected().at("wrong_size"), 2);
  EXPECT_EQ(p.evicted_workers_size(), 2);
  EXPECT_EQ(p.aborted(), "too few workers");
  EXPECT_EQ(p.last_snapshot_unix_s(), 1700000000);
  EXPECT_EQ(p.snapshots_failed(), 19);
  // Every field comes back (the JSON rendering covers them all).
  EXPECT_EQ(ShardStatsToJson(StatsFromProto(p)), ShardStatsToJson(s));
  EXPECT_EQ(StatsFromProto(p).rejected, s.rejected);
  EXPECT_EQ(StatsFromProto(p).aborted, s.aborted);
}

// The field list in common/shard_stats.h and the proto's StatsResponse name
// the same fields: a counter added to one but not the other fails here.
// shared_memory is no counter: the answer to a probe
// (StatsRequest.shared_memory_probe, worker/shared_route.h).
TEST(RpcConvertTest, StatsFieldListMatchesTheProto) {
  std::set<std::string> listed;
#define DP_STATS_NAME(type, name, json_key, kind) listed.insert(#name);
  DOWNPOUR_SHARD_STATS_FIELDS(DP_STATS_NAME)
#undef DP_STATS_NAME
  std::set<std::string> in_proto;
  const google::protobuf::Descriptor* d = proto::StatsResponse::descriptor();
  for (int i = 0; i < d->field_count(); ++i) in_proto.insert(d->field(i)->name());
  EXPECT_EQ(in_proto.erase("shared_memory"), 1u);
  EXPECT_EQ(listed, in_proto);
}

}  // namespace
}  // namespace downpour
