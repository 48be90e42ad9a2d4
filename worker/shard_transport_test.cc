// ShardTransport against real parameter servers in this process
// (ParameterServerHost on loopback): calls per shard, calls per part over
// the part's connection, and errors naming the shard.
#include "worker/shard_transport.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "rpc/grpc_config.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

constexpr char kGetStatsMethod[] = "/downpour.proto.ParameterServer/GetStats";

std::vector<std::unique_ptr<ParameterServerHost>> StartShards(int n) {
  std::vector<std::unique_ptr<ParameterServerHost>> hosts;
  for (int s = 0; s < n; ++s) {
    ParameterServerHostOptions o;
    o.store.shard_index = s;
    o.store.num_shards = n;
    auto host = ParameterServerHost::Create(o);
    EXPECT_TRUE(host.ok()) << host.status();
    if (host.ok()) hosts.push_back(std::move(*host));
  }
  return hosts;
}

ShardTransportOptions OptionsFor(
    const std::vector<std::unique_ptr<ParameterServerHost>>& hosts) {
  ShardTransportOptions o;
  for (const auto& h : hosts) o.hosts.push_back(h->address());
  o.connections_per_shard = 2;
  o.rpc_timeout = absl::Seconds(10);
  return o;
}

ClientSecurity Plaintext() {
  auto s = BuildClientSecurity(TransportSecurityOptions());
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

grpc::ByteBuffer StatsRequestBytes() {
  grpc::ByteBuffer out;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<proto::StatsRequest>::Serialize(
                  proto::StatsRequest(), &out, &own)
                  .ok());
  return out;
}

int ShardIndexOf(const grpc::ByteBuffer& reply) {
  proto::StatsResponse r;
  grpc::ByteBuffer copy(reply);
  if (!grpc::SerializationTraits<proto::StatsResponse>::Deserialize(&copy, &r)
           .ok()) {
    return -1;
  }
  return r.shard_index();
}

Part PartOn(int shard, int conn) {
  Part p;
  p.shard = shard;
  p.conn = conn;
  return p;
}

TEST(ShardTransportTest, CallEachShardReachesEveryShard) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  ShardTransport transport(OptionsFor(hosts), Plaintext());
  EXPECT_EQ(transport.num_shards(), 2);
  EXPECT_EQ(transport.connections_per_shard(), 2);
  proto::StatsRequest req;
  std::vector<proto::StatsResponse> resp(2);
  ASSERT_TRUE(transport
                  .CallEachShard(
                      "GetStats",
                      [&](int s, grpc::ClientContext* ctx, auto done) {
                        transport.stub(s)->async()->GetStats(
                            ctx, &req, &resp[s], std::move(done));
                      },
                      [&](int s) { resp[s].Clear(); })
                  .ok());
  EXPECT_EQ(resp[0].shard_index(), 0);
  EXPECT_EQ(resp[1].shard_index(), 1);
}

TEST(ShardTransportTest, CallPartsSendsTheChosenPartsToTheirShards) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  for (int window : {-1, 0, 1}) {
    ShardTransportOptions o = OptionsFor(hosts);
    o.max_calls_in_flight_per_connection = window;
    ShardTransport transport(o, Plaintext());
    const std::vector<Part> parts = {PartOn(0, 0), PartOn(0, 1), PartOn(1, 0),
                                     PartOn(1, 1)};
    const std::vector<grpc::ByteBuffer> req(parts.size(), StatsRequestBytes());
    std::vector<grpc::ByteBuffer> resp(parts.size());
    absl::Mutex mu;
    std::vector<int> consumed;
    const OnReply on_ok = [&](int i) {
      absl::MutexLock l(&mu);
      consumed.push_back(i);
      return absl::OkStatus();
    };
    ASSERT_TRUE(transport
                    .CallParts("GetStats", kGetStatsMethod, parts, {1, 2}, req,
                               &resp, on_ok)
                    .ok());
    EXPECT_EQ(resp[0].Length(), 0u);
    EXPECT_EQ(ShardIndexOf(resp[1]), 0);
    EXPECT_EQ(ShardIndexOf(resp[2]), 1);
    EXPECT_EQ(resp[3].Length(), 0u);
    std::sort(consumed.begin(), consumed.end());
    EXPECT_EQ(consumed, (std::vector<int>{1, 2}));

    // Every part: one whole exchange.
    consumed.clear();
    ASSERT_TRUE(transport
                    .CallAllParts("GetStats", kGetStatsMethod, parts, req,
                                  &resp, on_ok)
                    .ok());
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(ShardIndexOf(resp[i]), parts[i].shard) << i;
    }
    EXPECT_EQ(consumed.size(), parts.size());
  }
}

TEST(ShardTransportTest, ErrorsNameTheShardAndItsAddress) {
  ShardTransportOptions o;
  o.hosts = {"127.0.0.1:1"};  // Nothing listens there.
  o.retry.max_attempts = 2;
  ShardTransport transport(o, Plaintext());
  EXPECT_EQ(transport.ShardName(0), "shard 0 (127.0.0.1:1)");
  proto::StatsRequest req;
  proto::StatsResponse resp;
  const absl::Status s = transport.CallEachShard(
      "GetStats",
      [&](int s, grpc::ClientContext* ctx, auto done) {
        transport.stub(s)->async()->GetStats(ctx, &req, &resp, std::move(done));
      },
      [&](int) { resp.Clear(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(
      s.message(), "GetStats to shard 0 (127.0.0.1:1) after 2 attempts: "))
      << s;
}

}  // namespace
}  // namespace downpour
