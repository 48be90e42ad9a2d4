// Every kind of bad request, sent over gRPC to a live ps_server process:
// each gets INVALID_ARGUMENT or FAILED_PRECONDITION with a message naming the
// problem, is counted, changes nothing, and the server keeps serving.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/sharding.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/rpc_convert.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

class BadRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.num_shards = 2;
    o.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=0.5"};
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto credentials = BuildChannelCredentials(TransportSecurityOptions());
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    channel_ = grpc::CreateChannel(cluster_->hosts()[0], *credentials);
    stub_ = proto::ParameterServer::NewStub(channel_);
    layout_.tensors = {{"w", {100, 300}}, {"b", {10}}};
    layout_.num_shards = 2;
    layout_.max_chunk_bytes = 64 << 10;
    layout_.spread_min_bytes = 16 << 10;
    map_ = *ComputeShardMap(layout_);
    ASSERT_GE(map_.shard_chunks[0].size(), 1u);
    ASSERT_GE(map_.shard_chunks[1].size(), 1u);
  }

  // Values for the chunks of shard 0: element i of chunk c is c + i/1000.
  proto::DeclareModelRequest GoodDeclare() {
    proto::DeclareModelRequest req;
    LayoutToProto(layout_, req.mutable_layout());
    for (int32_t id : map_.shard_chunks[0]) {
      std::vector<float> v(map_.chunks[id].num_elements);
      for (size_t i = 0; i < v.size(); ++i) v[i] = id + i / 1000.0f;
      proto::ChunkValues* c = req.add_initial();
      c->set_chunk_id(id);
      c->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    }
    return req;
  }

  proto::PushRequest GoodPush(int64_t seq, float value) {
    proto::PushRequest req;
    req.set_worker_id(0);
    req.set_seq(seq);
    for (int32_t id : map_.shard_chunks[0]) {
      std::vector<float> g(map_.chunks[id].num_elements, value);
      proto::ChunkGradient* c = req.add_gradients();
      c->set_chunk_id(id);
      c->set_base_version(0);
      c->set_data(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
    }
    return req;
  }

  grpc::Status Declare(const proto::DeclareModelRequest& req) {
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    return stub_->DeclareModel(&ctx, req, &resp);
  }
  grpc::Status Push(const proto::PushRequest& req) {
    grpc::ClientContext ctx;
    proto::PushResponse resp;
    return stub_->Push(&ctx, req, &resp);
  }
  grpc::Status Pull(proto::PullResponse* resp) {
    grpc::ClientContext ctx;
    proto::PullRequest req;
    return stub_->Pull(&ctx, req, resp);
  }
  proto::StatsResponse Stats() {
    grpc::ClientContext ctx;
    proto::StatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(&ctx, proto::StatsRequest(), &resp).ok());
    return resp;
  }

  // Expects a pull now to return `before`'s bytes, every chunk at `version`.
  void ExpectUnchanged(const proto::PullResponse& before, int64_t version) {
    proto::PullResponse now;
    ASSERT_TRUE(Pull(&now).ok());
    ASSERT_EQ(now.chunks_size(), before.chunks_size());
    for (int i = 0; i < now.chunks_size(); ++i) {
      EXPECT_EQ(now.chunks(i).data(), before.chunks(i).data());
      EXPECT_EQ(now.chunks(i).version(), version);
    }
  }

  // Expects `s` to be `code` with `needle` in its message.
  static void ExpectError(const grpc::Status& s, grpc::StatusCode code,
                          const std::string& needle) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos)
        << "message '" << s.error_message() << "' lacks '" << needle << "'";
  }

  std::unique_ptr<TestCluster> cluster_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  ModelLayout layout_;
  ShardMap map_;
};

TEST_F(BadRequestTest, RequestsBeforeDeclarationAreRefused) {
  proto::PullResponse pulled;
  ExpectError(Pull(&pulled), grpc::StatusCode::FAILED_PRECONDITION, "declared");
  ExpectError(Push(GoodPush(1, 1.0f)), grpc::StatusCode::FAILED_PRECONDITION,
              "declared");
  // A declaration missing a chunk is a first part: accepted, and the shard
  // still refuses pulls until every chunk has values.
  proto::DeclareModelRequest partial = GoodDeclare();
  partial.mutable_initial()->RemoveLast();
  EXPECT_TRUE(Declare(partial).ok());
  EXPECT_FALSE(Stats().initialized());
  ExpectError(Pull(&pulled), grpc::StatusCode::FAILED_PRECONDITION, "declared");
  EXPECT_EQ(Stats().rejected().at("not_initialized"), 3);
  // The rest completes it.
  EXPECT_TRUE(Declare(GoodDeclare()).ok());
  EXPECT_TRUE(Stats().initialized());
  EXPECT_TRUE(cluster_->AllRunning());
}

TEST_F(BadRequestTest, BadRequestsChangeNothingAndServerKeepsServing) {
  ASSERT_TRUE(Declare(GoodDeclare()).ok());
  ASSERT_TRUE(Push(GoodPush(1, 2.0f)).ok());  // version 1 everywhere
  proto::PullResponse before;
  ASSERT_TRUE(Pull(&before).ok());

  // A layout that disagrees with the declared one.
  proto::DeclareModelRequest other = GoodDeclare();
  other.mutable_layout()->mutable_tensors(1)->set_shape(0, 11);
  ExpectError(Declare(other), grpc::StatusCode::INVALID_ARGUMENT, "differs");
  // A layout cut for another number of shards.
  proto::DeclareModelRequest shards = GoodDeclare();
  shards.mutable_layout()->set_num_shards(3);
  ExpectError(Declare(shards), grpc::StatusCode::INVALID_ARGUMENT, "differs");

  // Unknown chunk: one owned by shard 1, and one that exists nowhere.
  proto::PushRequest unknown = GoodPush(2, 1.0f);
  unknown.mutable_gradients(0)->set_chunk_id(map_.shard_chunks[1][0]);
  ExpectError(Push(unknown), grpc::StatusCode::INVALID_ARGUMENT, "not held");
  unknown.mutable_gradients(0)->set_chunk_id(12345);
  ExpectError(Push(unknown), grpc::StatusCode::INVALID_ARGUMENT, "not held");
  // Wrong byte length (one float short, and not a multiple of 4).
  proto::PushRequest wrong = GoodPush(2, 1.0f);
  wrong.mutable_gradients()->rbegin()->mutable_data()->resize(
      wrong.gradients().rbegin()->data().size() - 4);
  ExpectError(Push(wrong), grpc::StatusCode::INVALID_ARGUMENT, "bytes");
  wrong = GoodPush(2, 1.0f);
  wrong.mutable_gradients(0)->mutable_data()->push_back('x');
  ExpectError(Push(wrong), grpc::StatusCode::INVALID_ARGUMENT, "bytes");
  // NaN and Inf in the last chunk: the first chunks must not be applied.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    proto::PushRequest nan = GoodPush(2, 1.0f);
    std::string* data = nan.mutable_gradients()->rbegin()->mutable_data();
    std::memcpy(data->data() + data->size() - 4, &bad, 4);
    ExpectError(Push(nan), grpc::StatusCode::INVALID_ARGUMENT, "NaN or Inf");
  }
  // Bad worker id / sequence number.
  proto::PushRequest bad_seq = GoodPush(0, 1.0f);
  ExpectError(Push(bad_seq), grpc::StatusCode::INVALID_ARGUMENT, "seq");
  // A pull of a chunk this shard does not hold.
  {
    grpc::ClientContext ctx;
    proto::PullRequest req;
    req.add_chunk_ids(map_.shard_chunks[1][0]);
    proto::PullResponse resp;
    ExpectError(stub_->Pull(&ctx, req, &resp),
                grpc::StatusCode::INVALID_ARGUMENT, "not held");
  }
  // Bytes that are not a protobuf at all, through the generic stub.
  {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    grpc::Slice slice(std::string("\xff\xff\xff\xff garbage \x01\x02", 16));
    grpc::ByteBuffer request(&slice, 1), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/downpour.proto.ParameterServer/Push",
                      grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_FALSE(status.ok());
  }

  // Nothing changed: same bytes, same versions.
  ExpectUnchanged(before, 1);
  proto::StatsResponse stats = Stats();
  EXPECT_EQ(stats.pushes_applied(), 1);
  EXPECT_EQ(stats.rejected().at("layout_mismatch"), 2);
  EXPECT_EQ(stats.rejected().at("unknown_chunk"), 3);
  EXPECT_EQ(stats.rejected().at("wrong_size"), 2);
  EXPECT_EQ(stats.rejected().at("non_finite"), 2);
  EXPECT_EQ(stats.rejected().at("bad_request"), 1);

  // Still serving: a good push applies (values move by lr * 1 = 0.5).
  ASSERT_TRUE(Push(GoodPush(2, 1.0f)).ok());
  proto::PullResponse last;
  ASSERT_TRUE(Pull(&last).ok());
  const float* b = reinterpret_cast<const float*>(before.chunks(0).data().data());
  const float* a = reinterpret_cast<const float*>(last.chunks(0).data().data());
  EXPECT_FLOAT_EQ(a[0], b[0] - 0.5f);
  EXPECT_EQ(last.chunks(0).version(), 2);
  EXPECT_TRUE(cluster_->AllRunning());
}

// PushPull refuses what Push refuses (changing nothing), refuses a leave and
// an unknown pull encoding before applying anything, and otherwise returns
// the pushed chunks' values after the push, also for a retried push.
TEST_F(BadRequestTest, PushPullRefusesBadCallsAndReturnsThePushedValues) {
  ASSERT_TRUE(Declare(GoodDeclare()).ok());
  auto push_pull = [&](const proto::PushRequest& req, proto::PullResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->PushPull(&ctx, req, resp);
  };
  proto::PullResponse before;
  ASSERT_TRUE(Pull(&before).ok());

  proto::PullResponse resp;
  proto::PushRequest nan = GoodPush(1, 1.0f);
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.mutable_gradients(0)->mutable_data()->data(), &bad, 4);
  ExpectError(push_pull(nan, &resp), grpc::StatusCode::INVALID_ARGUMENT,
              "NaN or Inf");
  for (int bad_encoding : {99, -1}) {  // -1 goes as a 10-byte varint.
    proto::PushRequest encoding = GoodPush(1, 1.0f);
    encoding.set_pull_encoding(static_cast<proto::Encoding>(bad_encoding));
    ExpectError(push_pull(encoding, &resp), grpc::StatusCode::INVALID_ARGUMENT,
                "pull_encoding");
  }
  proto::PushRequest leave;
  leave.set_worker_id(0);
  leave.set_leave(true);
  ExpectError(push_pull(leave, &resp), grpc::StatusCode::INVALID_ARGUMENT,
              "leave");
  ExpectUnchanged(before, 0);
  EXPECT_EQ(Stats().pushes_applied(), 0);

  // A good one: every pushed chunk comes back, moved by lr * 2 = 1.
  const proto::PushRequest good = GoodPush(1, 2.0f);
  for (int attempt = 0; attempt < 2; ++attempt) {  // The second is a retry.
    proto::PullResponse got;
    ASSERT_TRUE(push_pull(good, &got).ok()) << attempt;
    ASSERT_EQ(got.chunks_size(), good.gradients_size());
    for (int i = 0; i < got.chunks_size(); ++i) {
      EXPECT_EQ(got.chunks(i).chunk_id(), good.gradients(i).chunk_id());
      EXPECT_EQ(got.chunks(i).version(), 1);
      ASSERT_EQ(got.chunks(i).data().size(), before.chunks(i).data().size());
      const float* a = reinterpret_cast<const float*>(got.chunks(i).data().data());
      const float* b =
          reinterpret_cast<const float*>(before.chunks(i).data().data());
      for (size_t k = 0; k < got.chunks(i).data().size() / 4; ++k) {
        ASSERT_EQ(a[k], b[k] - 1.0f) << "chunk " << i << " element " << k;
      }
    }
  }
  EXPECT_EQ(Stats().pushes_applied(), 1);
  EXPECT_TRUE(cluster_->AllRunning());
}

}  // namespace
}  // namespace downpour
