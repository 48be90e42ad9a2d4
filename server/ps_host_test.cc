#include "server/ps_host.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/rpc_convert.h"

namespace downpour {
namespace {

std::unique_ptr<proto::ParameterServer::Stub> StubFor(const std::string& address) {
  auto credentials = BuildChannelCredentials(TransportSecurityOptions());
  EXPECT_TRUE(credentials.ok());
  return proto::ParameterServer::NewStub(
      grpc::CreateChannel(address, *credentials));
}

absl::StatusOr<proto::StatsResponse> GetStats(const std::string& address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  proto::StatsRequest req;
  proto::StatsResponse resp;
  absl::Status s = FromGrpcStatus(
      StubFor(address)->GetStats(&ctx, req, &resp), "GetStats");
  if (!s.ok()) return s;
  return resp;
}

TEST(ParameterServerHostTest, ServesItsShardOnTheBoundPort) {
  ParameterServerHostOptions o;
  o.store.shard_index = 1;
  o.store.num_shards = 2;
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_GT((*host)->port(), 0);
  EXPECT_EQ((*host)->address(), absl::StrCat("127.0.0.1:", (*host)->port()));
  auto stats = GetStats((*host)->address());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->shard_index(), 1);
  EXPECT_EQ(stats->num_shards(), 2);
  EXPECT_EQ((*host)->store()->Stats().shard_index, 1);
  (*host)->Shutdown();
  (*host)->Wait();
  (*host)->Shutdown();  // Idempotent; the destructor calls it again.
  EXPECT_FALSE(GetStats((*host)->address()).ok());
}

TEST(ParameterServerHostTest, ListensOnEveryAddress) {
  ParameterServerHostOptions o;
  o.listen_addresses = {"127.0.0.1:0", "127.0.0.2:0"};
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok()) << host.status();
  for (int a = 0; a < 2; ++a) {
    EXPECT_GT((*host)->port(a), 0);
    EXPECT_EQ((*host)->address(a),
              absl::StrCat("127.0.0.", a + 1, ":", (*host)->port(a)));
    EXPECT_TRUE(GetStats((*host)->address(a)).ok()) << a;
  }
}

TEST(ParameterServerHostTest, BadOptionsAreRefused) {
  ParameterServerHostOptions no_address;
  no_address.listen_addresses.clear();
  EXPECT_EQ(ParameterServerHost::Create(no_address).status().code(),
            absl::StatusCode::kInvalidArgument);
  ParameterServerHostOptions bad_store;
  bad_store.store.num_shards = 0;
  EXPECT_EQ(ParameterServerHost::Create(bad_store).status().code(),
            absl::StatusCode::kInvalidArgument);
  ParameterServerHostOptions bad_service;
  bad_service.service.debug_drop_reply_every = -1;
  EXPECT_EQ(ParameterServerHost::Create(bad_service).status().code(),
            absl::StatusCode::kInvalidArgument);
  ParameterServerHostOptions bad_address;
  // An address of no interface here (TEST-NET-1, RFC 5737).
  bad_address.listen_addresses = {"192.0.2.1:0"};
  // Plaintext on a non-loopback address is refused before listening...
  EXPECT_EQ(ParameterServerHost::Create(bad_address).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // ...unless allowed; then the listen itself fails.
  bad_address.security.allow_insecure = true;
  auto h = ParameterServerHost::Create(bad_address);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(h.status().message()),
            "could not listen on 192.0.2.1:0");
}

// A pull waiting on a sync step would hold gRPC's shutdown for the whole
// sync timeout: Shutdown answers it first.
TEST(ParameterServerHostTest, ShutdownAnswersAPullWaitingOnASyncStep) {
  ParameterServerHostOptions o;
  o.store.mode = TrainMode::kSync;
  o.store.num_workers = 2;
  o.store.sync_timeout = absl::Seconds(60);
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok()) << host.status();
  auto stub = StubFor((*host)->address());
  ModelLayout layout;
  layout.tensors = {{"w", {4}}};
  layout.num_shards = 1;
  proto::DeclareModelRequest declare;
  LayoutToProto(layout, declare.mutable_layout());
  proto::ChunkValues* c = declare.add_initial();
  c->set_chunk_id(0);
  c->set_data(std::string(16, '\0'));
  {
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    ASSERT_TRUE(stub->DeclareModel(&ctx, declare, &resp).ok());
  }
  grpc::ClientContext ctx;
  proto::PullRequest pull;
  pull.set_min_version(1);  // Step 1 never comes: nobody pushes.
  proto::PullResponse resp;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Pull(&ctx, &pull, &resp, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(300));  // The pull reaches the store.
  EXPECT_FALSE(done.HasBeenNotified());
  const absl::Time start = absl::Now();
  (*host)->Shutdown(absl::Seconds(10));
  (*host)->Wait();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
      << status.error_message();
}

// gRPC's default SO_REUSEPORT would let a second server bind a port in use
// and take half its connections; it fails instead.
TEST(ParameterServerHostTest, SecondServerOnAPortInUseFails) {
  auto first = ParameterServerHost::Create(ParameterServerHostOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  ParameterServerHostOptions same;
  same.listen_addresses = {(*first)->address()};
  auto second = ParameterServerHost::Create(same);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(second.status().message()),
            absl::StrCat("could not listen on ", (*first)->address()));
  // The first one still answers.
  EXPECT_TRUE(GetStats((*first)->address()).ok());
}

}  // namespace
}  // namespace downpour
