// Payloads through a worker's shared memory, against a real server on
// loopback (ParameterServerHost) and a region this process made: pushes,
// push-pulls and pulls move their float32 values through the region, the
// probe says whether a region is taken, and every refused request (a
// stranger's key, inline data beside a region, another encoding, a region
// not of the model's size, a chunk named twice, a NaN in the push area, a
// leave) changes nothing and leaves the server serving. Pushes written into
// the region's call block, once a probe took it, are served the same way
// without gRPC.
#include "server/shared_payloads.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"
#include "rpc/shared_calls.h"
#include "rpc/shared_memory.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

class SharedPayloadsTest : public ::testing::Test {
 protected:
  // One shard with sgd at rate 1 (a push of g turns v into v - g), the
  // model declared with the wire's values, and a region for it.
  void SetUp() override {
    ParameterServerHostOptions o;
    o.store.optimizer.name = "sgd";
    o.store.optimizer.learning_rate = 1;
    auto host = ParameterServerHost::Create(o);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    grpc::ChannelArguments args;
    ConfigureChannelArguments(&args);
    auto credentials = BuildChannelCredentials(TransportSecurityOptions());
    ASSERT_TRUE(credentials.ok());
    stub_ = proto::ParameterServer::NewStub(
        grpc::CreateCustomChannel(host_->address(), *credentials, args));
    layout_.tensors = {{"w", {10}}, {"b", {3}}};
    layout_.num_shards = 1;
    layout_.max_chunk_bytes = 16;  // 4 floats a chunk: 4 chunks.
    map_ = *ComputeShardMap(layout_);
    for (int64_t i = 0; i < layout_.NumElements(); ++i) {
      init_.push_back(0.5f * static_cast<float>(i) - 2);
      grads_.push_back(0.25f * static_cast<float>(i));
    }
    proto::DeclareModelRequest req;
    LayoutToProto(layout_, req.mutable_layout());
    for (const Chunk& c : map_.chunks) {
      proto::ChunkValues* v = req.add_initial();
      v->set_chunk_id(c.id);
      v->set_data(std::string(
          reinterpret_cast<const char*>(init_.data() + c.flat_offset),
          c.num_elements * 4));
    }
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    ASSERT_TRUE(stub_->DeclareModel(&ctx, req, &resp).ok());
    auto region = SharedRegion::Create(layout_.NumElements() * 4);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
  }

  // A push of grads_ (every chunk) through `ref`, its payloads in the push
  // area.
  proto::PushRequest SharedPush(int64_t seq, const wire::SharedRef& ref) {
    std::memcpy(region_->push_area(), grads_.data(), grads_.size() * 4);
    proto::PushRequest req;
    req.set_worker_id(0);
    req.set_seq(seq);
    SharedRefToProto(ref, req.mutable_shared());
    for (const Chunk& c : map_.chunks) req.add_gradients()->set_chunk_id(c.id);
    return req;
  }

  // Every chunk's values and versions, pulled over the wire.
  std::vector<float> WirePull(std::vector<int64_t>* versions) {
    proto::PullRequest req;
    grpc::ClientContext ctx;
    proto::PullResponse resp;
    EXPECT_TRUE(stub_->Pull(&ctx, req, &resp).ok());
    std::vector<float> values(init_.size(), -100.0f);
    versions->assign(map_.chunks.size(), -1);
    for (const proto::ChunkValues& c : resp.chunks()) {
      const Chunk& info = map_.chunks[c.chunk_id()];
      EXPECT_EQ(c.data().size(), static_cast<size_t>(info.num_elements) * 4);
      std::memcpy(values.data() + info.flat_offset, c.data().data(),
                  c.data().size());
      (*versions)[c.chunk_id()] = c.version();
    }
    return values;
  }

  std::vector<float> ReplyArea() const {
    std::vector<float> v(init_.size());
    std::memcpy(v.data(), region_->reply_area(), v.size() * 4);
    return v;
  }

  std::unique_ptr<ParameterServerHost> host_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  ModelLayout layout_;
  ShardMap map_;
  std::vector<float> init_, grads_;
  std::unique_ptr<SharedRegion> region_;
};

TEST_F(SharedPayloadsTest, PushPullAndPullGoThroughTheRegion) {
  {
    grpc::ClientContext ctx;
    proto::PullResponse resp;
    proto::PushRequest req = SharedPush(1, region_->ref());
    ASSERT_TRUE(stub_->PushPull(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.values_in_shared_memory());
    ASSERT_EQ(resp.chunks_size(), static_cast<int>(map_.chunks.size()));
    for (const proto::ChunkValues& c : resp.chunks()) {
      EXPECT_TRUE(c.data().empty());
      EXPECT_EQ(c.version(), 1);
    }
  }
  std::vector<float> expect(init_.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = init_[i] - grads_[i];
  EXPECT_EQ(ReplyArea(), expect);
  std::vector<int64_t> versions;
  EXPECT_EQ(WirePull(&versions), expect);

  // A pull of some chunks writes those only, each at its own place.
  std::memset(const_cast<char*>(region_->reply_area()), 0, expect.size() * 4);
  proto::PullRequest req;
  req.add_chunk_ids(1);
  SharedRefToProto(region_->ref(), req.mutable_shared());
  grpc::ClientContext ctx;
  proto::PullResponse resp;
  ASSERT_TRUE(stub_->Pull(&ctx, req, &resp).ok());
  EXPECT_TRUE(resp.values_in_shared_memory());
  const std::vector<float> got = ReplyArea();
  const Chunk& one = map_.chunks[1];
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const bool in = i >= one.flat_offset && i < one.flat_offset + one.num_elements;
    EXPECT_EQ(got[i], in ? expect[i] : 0.0f) << i;
  }
}

TEST_F(SharedPayloadsTest, TheProbeSaysWhetherARegionIsTaken) {
  proto::StatsRequest req;
  SharedRefToProto(region_->ref(), req.mutable_shared_memory_probe());
  grpc::ClientContext ctx;
  proto::StatsResponse resp;
  ASSERT_TRUE(stub_->GetStats(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.shared_memory(), "ok");

  req.mutable_shared_memory_probe()->set_key(region_->ref().key ^ 1);
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->GetStats(&ctx2, req, &resp).ok());
  EXPECT_NE(resp.shared_memory().find("does not match"), std::string::npos)
      << resp.shared_memory();

  grpc::ClientContext ctx3;
  ASSERT_TRUE(stub_->GetStats(&ctx3, proto::StatsRequest(), &resp).ok());
  EXPECT_EQ(resp.shared_memory(), "");
}

TEST_F(SharedPayloadsTest, RefusedRequestsChangeNothing) {
  const auto push_pull = [&](const proto::PushRequest& req) {
    grpc::ClientContext ctx;
    proto::PullResponse resp;
    return stub_->PushPull(&ctx, req, &resp);
  };
  wire::SharedRef stranger = region_->ref();
  stranger.key ^= 1;
  grpc::Status s = push_pull(SharedPush(1, stranger));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("key"), std::string::npos) << s.error_message();

  proto::PushRequest inline_too = SharedPush(2, region_->ref());
  inline_too.mutable_gradients(0)->set_data(std::string(16, '\0'));
  s = push_pull(inline_too);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chunk 0"), std::string::npos) << s.error_message();

  proto::PushRequest half = SharedPush(3, region_->ref());
  half.set_pull_encoding(proto::FP16);
  EXPECT_EQ(push_pull(half).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Areas that are not where a region of the model's size has them (replies
  // past the region's end, say), or a region of another size.
  wire::SharedRef late = region_->ref();
  late.reply_offset = late.size - 8;
  s = push_pull(SharedPush(4, late));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("does not fit"), std::string::npos)
      << s.error_message();
  wire::SharedRef big = region_->ref();
  big.size += 4096;
  EXPECT_EQ(push_pull(SharedPush(5, big)).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  proto::PushRequest twice = SharedPush(7, region_->ref());
  twice.add_gradients()->set_chunk_id(2);
  s = push_pull(twice);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chunk 2 named twice"), std::string::npos)
      << s.error_message();

  // A gradient value that is not finite, read where the worker wrote it.
  proto::PushRequest nan = SharedPush(8, region_->ref());
  const float bad = std::nanf("");
  std::memcpy(region_->push_area() + 4 * 5, &bad, 4);
  s = push_pull(nan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("NaN or Inf"), std::string::npos)
      << s.error_message();

  proto::PushRequest leave;
  leave.set_leave(true);
  SharedRefToProto(region_->ref(), leave.mutable_shared());
  grpc::ClientContext ctx;
  proto::PushResponse presp;
  EXPECT_EQ(stub_->Push(&ctx, leave, &presp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  proto::PullRequest fp16_pull;
  fp16_pull.set_encoding(proto::FP16);
  SharedRefToProto(region_->ref(), fp16_pull.mutable_shared());
  grpc::ClientContext ctx2;
  proto::PullResponse resp;
  EXPECT_EQ(stub_->Pull(&ctx2, fp16_pull, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // Nothing was applied, and the server still serves.
  std::vector<int64_t> versions;
  EXPECT_EQ(WirePull(&versions), init_);
  for (int64_t v : versions) EXPECT_EQ(v, 0);
  EXPECT_TRUE(push_pull(SharedPush(6, region_->ref())).ok());
  EXPECT_EQ(WirePull(&versions)[3], init_[3] - grads_[3]);
}

// Once a probe has taken a region with a call block for each of the
// model's shards, the shard serves pushes written into its slots: the same
// bytes as the gRPC methods', the same checks and the same store.
TEST_F(SharedPayloadsTest, PushesGoAsCallsThroughTheRegionsCallBlock) {
  auto region = SharedRegion::Create(layout_.NumElements() * 4, /*call_shards=*/1);
  ASSERT_TRUE(region.ok()) << region.status();
  region_ = std::move(*region);
  ShardCalls* block = region_->shard_calls(0);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->server_pid.load(), 0u);
  proto::StatsRequest probe;
  SharedRefToProto(region_->ref(), probe.mutable_shared_memory_probe());
  {
    grpc::ClientContext ctx;
    proto::StatsResponse resp;
    ASSERT_TRUE(stub_->GetStats(&ctx, probe, &resp).ok());
    EXPECT_EQ(resp.shared_memory(), "ok");
  }
  EXPECT_EQ(block->server_pid.load(), static_cast<uint32_t>(getpid()));

  // One call through slot `slot`, waited for: its status code and reply.
  const auto call = [&](int slot, CallMethod method, const std::string& bytes) {
    CallSlot& s = block->slots[slot];
    EXPECT_EQ(s.state.load(), static_cast<uint32_t>(SlotState::kFree));
    std::memcpy(s.request, bytes.data(), bytes.size());
    s.request_bytes = static_cast<uint32_t>(bytes.size());
    s.method = static_cast<uint32_t>(method);
    s.state.store(static_cast<uint32_t>(SlotState::kRequest));
    Ring(&block->bell);
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (s.state.load() != static_cast<uint32_t>(SlotState::kDone) &&
           absl::Now() < until) {
      absl::SleepFor(absl::Microseconds(100));
    }
    EXPECT_EQ(s.state.load(), static_cast<uint32_t>(SlotState::kDone));
    s.state.store(static_cast<uint32_t>(SlotState::kFree));
    return std::make_pair(s.code, std::string(s.reply, s.reply_bytes));
  };

  auto [code, reply] = call(
      0, CallMethod::kPushPull, SharedPush(1, region_->ref()).SerializeAsString());
  ASSERT_EQ(code, 0) << reply;
  proto::PullResponse pulled;
  ASSERT_TRUE(pulled.ParseFromString(reply));
  EXPECT_TRUE(pulled.values_in_shared_memory());
  ASSERT_EQ(pulled.chunks_size(), static_cast<int>(map_.chunks.size()));
  for (const proto::ChunkValues& c : pulled.chunks()) EXPECT_EQ(c.version(), 1);
  std::vector<float> expect(init_.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = init_[i] - grads_[i];
  EXPECT_EQ(ReplyArea(), expect);

  std::tie(code, reply) =
      call(5, CallMethod::kPush, SharedPush(2, region_->ref()).SerializeAsString());
  ASSERT_EQ(code, 0) << reply;
  proto::PushResponse pushed;
  ASSERT_TRUE(pushed.ParseFromString(reply));
  for (int64_t v : pushed.versions()) EXPECT_EQ(v, 2);

  // Refused as over gRPC, nothing applied: bytes that are no request, a
  // stranger's key, a chunk named twice.
  std::tie(code, reply) = call(1, CallMethod::kPush, "\xff\xff\xff");
  EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  wire::SharedRef stranger = region_->ref();
  stranger.key ^= 1;
  std::tie(code, reply) =
      call(2, CallMethod::kPushPull, SharedPush(3, stranger).SerializeAsString());
  EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
  proto::PushRequest twice = SharedPush(4, region_->ref());
  twice.add_gradients()->set_chunk_id(2);
  std::tie(code, reply) = call(3, CallMethod::kPushPull, twice.SerializeAsString());
  EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(reply.find("chunk 2 named twice"), std::string::npos) << reply;
  std::vector<int64_t> versions;
  std::vector<float> now = WirePull(&versions);
  for (int64_t v : versions) EXPECT_EQ(v, 2);

  // And it goes on serving.
  std::tie(code, reply) =
      call(3, CallMethod::kPush, SharedPush(5, region_->ref()).SerializeAsString());
  EXPECT_EQ(code, 0) << reply;
  WirePull(&versions);
  for (int64_t v : versions) EXPECT_EQ(v, 3);
}

// A region whose call blocks are not one per shard of the model is refused.
TEST_F(SharedPayloadsTest, CallBlocksMustMatchTheModelsShards) {
  auto region = SharedRegion::Create(layout_.NumElements() * 4, /*call_shards=*/3);
  ASSERT_TRUE(region.ok()) << region.status();
  proto::StatsRequest probe;
  SharedRefToProto((*region)->ref(), probe.mutable_shared_memory_probe());
  grpc::ClientContext ctx;
  proto::StatsResponse resp;
  ASSERT_TRUE(stub_->GetStats(&ctx, probe, &resp).ok());
  EXPECT_NE(resp.shared_memory().find("does not fit"), std::string::npos)
      << resp.shared_memory();
  EXPECT_EQ((*region)->shard_calls(0)->server_pid.load(), 0u);
}

}  // namespace
}  // namespace downpour
