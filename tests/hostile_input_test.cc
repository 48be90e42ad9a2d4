// Over real ps_server processes: defects an outside
// client found, each of which this test reproduced before its fix.
//  * A second ps_server on a port in use started and took half the
//    connections (gRPC's default SO_REUSEPORT); now it exits 1 naming the
//    address.
//  * "00 01" (field number 0) before a valid push was parsed and applied.
//  * An unreadable DeclareModel or GetStats got UNIMPLEMENTED with an empty
//    message; now INVALID_ARGUMENT saying what was malformed.
//  * A pull too large to send was refused by gRPC after its bytes were
//    counted in bytes_pulled; now the store refuses it before reading.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/sharding.h"
#include "deploy/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kService[] = "/downpour.proto.ParameterServer/";

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = TestCluster::Start(TestClusterOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto credentials = BuildChannelCredentials(TransportSecurityOptions());
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // The oversize pull's reply.
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(cluster_->hosts()[0], *credentials,
                                         args);
    stub_ = proto::ParameterServer::NewStub(channel_);
  }

  // Sends `bytes` as the request of `method` through the generic stub.
  grpc::Status RawCall(const std::string& method, const std::string& bytes,
                       std::string* reply = nullptr) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, absl::StrCat(kService, method), grpc::StubOptions(),
                      &request, &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    if (reply != nullptr) ByteBufferBytes(response, reply);
    return status;
  }

  // Declares one tensor of `elements` floats (1 MiB chunks) with values.
  void DeclareTensor(int64_t elements, ShardMap* map) {
    ModelLayout layout;
    layout.tensors = {{"w", {elements}}};
    auto m = ComputeShardMap(layout);
    ASSERT_TRUE(m.ok()) << m.status();
    *map = *m;
    proto::DeclareModelRequest req;
    LayoutToProto(layout, req.mutable_layout());
    for (const Chunk& c : map->chunks) {
      proto::ChunkValues* v = req.add_initial();
      v->set_chunk_id(c.id);
      v->set_data(std::string(c.num_elements * 4, '\0'));
    }
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    grpc::Status s = stub_->DeclareModel(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  proto::StatsResponse Stats() {
    grpc::ClientContext ctx;
    proto::StatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(&ctx, proto::StatsRequest(), &resp).ok());
    return resp;
  }

  std::unique_ptr<TestCluster> cluster_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

TEST_F(HostileInputTest, SecondServerOnThePortExitsNamingTheAddress) {
  const std::string address = cluster_->hosts()[0];
  const std::string port = address.substr(address.rfind(':') + 1);
  SubprocessOptions so;
  so.argv = {"server/ps_server", absl::StrCat("--port=", port),
             "--num_workers=1"};
  auto second = Subprocess::Start(so);
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<std::string> lines;
  ASSERT_TRUE((*second)->WaitFor(absl::Seconds(30), &lines))
      << "the second server is still running on port " << port;
  EXPECT_EQ((*second)->exit_status().exit_code, 1);
  bool named = false;
  for (const std::string& l : lines) {
    named |= absl::StrContains(l, absl::StrCat("127.0.0.1:", port));
    EXPECT_FALSE(absl::StrContains(l, "listening")) << l;
  }
  EXPECT_TRUE(named) << "no line names 127.0.0.1:" << port;
  // The first server still answers every connection.
  for (int i = 0; i < 8; ++i) {
    auto credentials = BuildChannelCredentials(TransportSecurityOptions());
    auto stub = proto::ParameterServer::NewStub(
        grpc::CreateChannel(address, *credentials));
    grpc::ClientContext ctx;
    proto::StatsResponse resp;
    EXPECT_TRUE(stub->GetStats(&ctx, proto::StatsRequest(), &resp).ok());
  }
  EXPECT_TRUE(cluster_->AllRunning());
}

TEST_F(HostileInputTest, PushWithFieldNumberZeroIsRefusedAndNotApplied) {
  ShardMap map;
  ASSERT_NO_FATAL_FAILURE(DeclareTensor(1000, &map));
  proto::PushRequest push;
  push.set_worker_id(0);
  push.set_seq(1);
  proto::ChunkGradient* g = push.add_gradients();
  g->set_chunk_id(0);
  std::vector<float> ones(1000, 1.0f);
  g->set_data(std::string(reinterpret_cast<const char*>(ones.data()), 4000));
  const std::string good = push.SerializeAsString();
  grpc::Status s = RawCall("Push", std::string("\x00\x01", 2) + good);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "field number 0"))
      << s.error_message();
  EXPECT_EQ(Stats().pushes_applied(), 0);
  // The same push without the prefix applies.
  EXPECT_TRUE(RawCall("Push", good).ok());
  EXPECT_EQ(Stats().pushes_applied(), 1);
}

TEST_F(HostileInputTest, UnreadableDeclareAndStatsAreInvalidArgument) {
  const std::string garbage("\xff\xff\xff\xff garbage \x01\x02", 16);
  for (const char* method : {"DeclareModel", "GetStats"}) {
    grpc::Status s = RawCall(method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_TRUE(absl::StrContains(s.error_message(), "malformed"))
        << method << ": '" << s.error_message() << "'";
  }
  // Good ones still work, through the raw path as through the stub.
  std::string reply;
  ASSERT_TRUE(RawCall("GetStats", "", &reply).ok());
  proto::StatsResponse stats;
  ASSERT_TRUE(stats.ParseFromString(reply));
  EXPECT_FALSE(stats.initialized());
  ShardMap map;
  ASSERT_NO_FATAL_FAILURE(DeclareTensor(10, &map));
  EXPECT_TRUE(Stats().initialized());
}

TEST_F(HostileInputTest, OversizePullIsRefusedBeforeItIsCounted) {
  ShardMap map;
  // 20 MiB of values; asking for every chunk 4 times is 80 MiB, above the
  // 64 MiB message limit.
  ASSERT_NO_FATAL_FAILURE(DeclareTensor(int64_t{5} << 20, &map));
  proto::PullRequest req;
  for (int r = 0; r < 4; ++r) {
    for (const Chunk& c : map.chunks) req.add_chunk_ids(c.id);
  }
  grpc::ClientContext ctx;
  proto::PullResponse resp;
  grpc::Status s = stub_->Pull(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "message limit"))
      << s.error_message();
  proto::StatsResponse stats = Stats();
  EXPECT_EQ(stats.bytes_pulled(), 0);
  EXPECT_EQ(stats.rejected().at("too_large"), 1);
  // Once is fine, and counted.
  grpc::ClientContext ctx2;
  proto::PullRequest once;
  s = stub_->Pull(&ctx2, once, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Stats().bytes_pulled(), int64_t{20} << 20);
}

}  // namespace
}  // namespace downpour
