// The gRPC adapter over a real grpc::Server on loopback (started through
// ParameterServerHost): requests written by the hand-written wire format and
// by the generated protobuf code reach the store, replies come back in both
// encodings, bad requests are INVALID_ARGUMENT, and dropped replies
// (ServiceOptions::debug_drop_reply_every) still apply a push exactly once.
#include "server/grpc_service.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"
#include "rpc/wire.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

class GrpcServiceTest : public ::testing::Test {
 protected:
  // One shard with sgd at rate 1: a push of g turns v into exactly v - g.
  void Start(int drop_reply_every = 0, TrainMode mode = TrainMode::kAsync) {
    ParameterServerHostOptions o;
    o.store.optimizer.name = "sgd";
    o.store.optimizer.learning_rate = 1;
    o.store.mode = mode;
    if (mode != TrainMode::kAsync) o.store.num_workers = 3;
    o.service.debug_drop_reply_every = drop_reply_every;
    auto host = ParameterServerHost::Create(o);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    grpc::ChannelArguments args;
    ConfigureChannelArguments(&args);
    auto credentials = BuildChannelCredentials(TransportSecurityOptions());
    ASSERT_TRUE(credentials.ok());
    channel_ = grpc::CreateCustomChannel(host_->address(), *credentials, args);
    stub_ = proto::ParameterServer::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
    layout_.tensors = {{"w", {10}}, {"b", {3}}};
    layout_.num_shards = 1;
    layout_.max_chunk_bytes = 16;  // 4 floats a chunk: 4 chunks.
    map_ = *ComputeShardMap(layout_);
    for (int64_t i = 0; i < layout_.NumElements(); ++i) {
      init_.push_back(0.5f * static_cast<float>(i) - 2);
    }
  }

  grpc::Status Declare(proto::Encoding encoding = proto::RAW_F32) {
    proto::DeclareModelRequest req;
    LayoutToProto(layout_, req.mutable_layout());
    for (const Chunk& c : map_.chunks) {
      proto::ChunkValues* v = req.add_initial();
      v->set_chunk_id(c.id);
      v->set_encoding(encoding);
      v->set_data(std::string(
          reinterpret_cast<const char*>(init_.data() + c.flat_offset),
          c.num_elements * 4));
    }
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    return stub_->DeclareModel(&ctx, req, &resp);
  }

  // Every chunk's values (RAW_F32 replies) as one flat vector.
  grpc::Status Pull(std::vector<float>* values, std::vector<int64_t>* versions,
                    int encoding = proto::RAW_F32) {
    proto::PullRequest req;
    req.set_encoding(static_cast<proto::Encoding>(encoding));
    grpc::ClientContext ctx;
    proto::PullResponse resp;
    grpc::Status s = stub_->Pull(&ctx, req, &resp);
    if (s.ok()) Flatten(resp, values, versions);
    return s;
  }

  void Flatten(const proto::PullResponse& resp, std::vector<float>* values,
               std::vector<int64_t>* versions) {
    values->assign(init_.size(), -100.0f);
    versions->assign(map_.chunks.size(), -1);
    for (const proto::ChunkValues& c : resp.chunks()) {
      const Chunk& info = map_.chunks[c.chunk_id()];
      ASSERT_EQ(c.data().size(), static_cast<size_t>(info.num_elements) * 4);
      std::memcpy(values->data() + info.flat_offset, c.data().data(),
                  c.data().size());
      (*versions)[c.chunk_id()] = c.version();
    }
  }

  // A push of `grads` (every chunk) as the client writes it: the wire
  // writer's bytes, sent through the generic stub.
  // `head` gives the worker, the part and pull_min_version; seq and
  // pull_encoding are set here. `chunks` empty: every chunk.
  std::string PushBytes(int64_t seq, const std::vector<float>& grads,
                        std::optional<wire::Encoding> pull_encoding,
                        wire::PushHead head = {.worker_id = 2, .num_parts = 1},
                        std::vector<int32_t> chunks = {}) {
    head.seq = seq;
    head.pull_encoding = pull_encoding;
    std::string bytes;
    wire::AppendPushHead(head, &bytes);
    if (chunks.empty()) {
      for (const Chunk& c : map_.chunks) chunks.push_back(c.id);
    }
    for (int32_t id : chunks) {
      const Chunk& c = map_.chunks[id];
      wire::AppendChunkHeader(wire::kPushGradientsField, c.id, 0,
                              wire::Encoding::kRawF32, c.num_elements * 4,
                              &bytes);
      bytes.append(reinterpret_cast<const char*>(grads.data() + c.flat_offset),
                   c.num_elements * 4);
    }
    return bytes;
  }

  // One call through the generic stub, started now and waited for later.
  struct PendingCall {
    grpc::ByteBuffer req, resp;
    grpc::ClientContext ctx;
    absl::Notification done;
    grpc::Status status;

    grpc::Status Wait(std::string* response) {
      done.WaitForNotification();
      response->clear();
      if (status.ok()) ByteBufferBytes(resp, response);
      return status;
    }
  };

  std::unique_ptr<PendingCall> StartCall(const char* method,
                                         const std::string& request) {
    auto call = std::make_unique<PendingCall>();
    grpc::Slice slice(request);
    call->req = grpc::ByteBuffer(&slice, 1);
    PendingCall* c = call.get();
    generic_->UnaryCall(&c->ctx, method, grpc::StubOptions(), &c->req,
                        &c->resp, [c](grpc::Status s) {
                          c->status = std::move(s);
                          c->done.Notify();
                        });
    return call;
  }

  grpc::Status Call(const char* method, const std::string& request,
                    std::string* response) {
    return StartCall(method, request)->Wait(response);
  }

  grpc::Status Push(int64_t seq, const std::vector<float>& grads,
                    proto::PushResponse* resp) {
    std::string bytes;
    grpc::Status s = Call(kPushMethod, PushBytes(seq, grads, std::nullopt), &bytes);
    if (s.ok()) {
      EXPECT_TRUE(resp->ParseFromString(bytes));
    }
    return s;
  }

  std::vector<float> Minus(const std::vector<float>& a,
                           const std::vector<float>& b) {
    std::vector<float> out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
    return out;
  }

  std::unique_ptr<ParameterServerHost> host_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  ModelLayout layout_;
  ShardMap map_;
  std::vector<float> init_;
};

TEST_F(GrpcServiceTest, DeclarePullPushAndStats) {
  Start();
  ASSERT_TRUE(Declare().ok());
  std::vector<float> got;
  std::vector<int64_t> versions;
  ASSERT_TRUE(Pull(&got, &versions).ok());
  EXPECT_EQ(got, init_);
  for (int64_t v : versions) EXPECT_EQ(v, 0);

  const std::vector<float> g(init_.size(), 0.25f);
  proto::PushResponse resp;
  ASSERT_TRUE(Push(1, g, &resp).ok());
  EXPECT_FALSE(resp.duplicate());
  ASSERT_EQ(resp.versions_size(), static_cast<int>(map_.chunks.size()));
  for (int64_t v : resp.versions()) EXPECT_EQ(v, 1);
  ASSERT_TRUE(Pull(&got, &versions).ok());
  EXPECT_EQ(got, Minus(init_, g));
  // The same push again is a retry: acknowledged, not applied.
  ASSERT_TRUE(Push(1, g, &resp).ok());
  EXPECT_TRUE(resp.duplicate());
  ASSERT_TRUE(Pull(&got, &versions).ok());
  EXPECT_EQ(got, Minus(init_, g));

  grpc::ClientContext ctx;
  proto::StatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(&ctx, proto::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.pushes_applied(), 1);
  EXPECT_EQ(stats.pushes_duplicate(), 1);
  EXPECT_EQ(stats.num_chunks(), static_cast<int>(map_.chunks.size()));
  EXPECT_EQ(stats.optimizer(), "sgd");
}

TEST_F(GrpcServiceTest, PushPullRepliesWithTheValuesAfterThePush) {
  Start();
  ASSERT_TRUE(Declare().ok());
  const std::vector<float> g(init_.size(), -1.0f);
  std::string bytes;
  ASSERT_TRUE(
      Call(kPushPullMethod, PushBytes(1, g, wire::Encoding::kRawF32), &bytes)
          .ok());
  proto::PullResponse resp;
  ASSERT_TRUE(resp.ParseFromString(bytes));
  std::vector<float> got;
  std::vector<int64_t> versions;
  Flatten(resp, &got, &versions);
  EXPECT_EQ(got, Minus(init_, g));
  for (int64_t v : versions) EXPECT_EQ(v, 1);

  // In bf16 the reply is the values rounded to bf16 (these are exact).
  ASSERT_TRUE(
      Call(kPushPullMethod, PushBytes(2, g, wire::Encoding::kBf16), &bytes)
          .ok());
  const wire::Pieces pieces{bytes};
  auto chunks = wire::ParsePullResponse(pieces);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->size(), map_.chunks.size());
  std::string scratch;
  for (const wire::WireChunk& c : *chunks) {
    EXPECT_EQ(c.encoding, wire::Encoding::kBf16);
    const Chunk& info = map_.chunks[c.chunk_id];
    ASSERT_TRUE(wire::DecodeInto(pieces, c, got.data() + info.flat_offset,
                                 info.num_elements, &scratch)
                    .ok());
  }
  EXPECT_EQ(got, Minus(Minus(init_, g), g));
}

// Sync: a PushPull with pull_min_version is answered once the step has
// completed, with every chunk of the shard (not only the pushed ones), as a
// pull waiting for that step would be.
TEST_F(GrpcServiceTest, PushPullWithPullMinVersionWaitsForTheStep) {
  Start(/*drop_reply_every=*/0, TrainMode::kSync);
  ASSERT_TRUE(Declare().ok());
  std::vector<float> g0(init_.size()), g1(init_.size()), g2(init_.size());
  for (size_t i = 0; i < init_.size(); ++i) {
    // Sums divisible by 3: the mean is exact however the server forms it.
    g0[i] = 3.0f * static_cast<float>(i);
    g1[i] = 6.0f;
    g2[i] = -3.0f;
  }
  std::string bytes;
  // Worker 0's push in two parts: chunks 0 and 1 by Push, then chunks 2 and
  // 3 by a PushPull that waits for step 1.
  ASSERT_TRUE(Call(kPushMethod,
                   PushBytes(1, g0, std::nullopt,
                             {.worker_id = 0, .part = 0, .num_parts = 2},
                             {0, 1}),
                   &bytes)
                  .ok());
  std::unique_ptr<PendingCall> waiting = StartCall(
      kPushPullMethod,
      PushBytes(1, g0, wire::Encoding::kRawF32,
                {.worker_id = 0, .part = 1, .num_parts = 2, .pull_min_version = 1},
                {2, 3}));
  // Worker 1 pushes; worker 2 has not: the step is not complete.
  ASSERT_TRUE(Call(kPushMethod,
                   PushBytes(1, g1, std::nullopt, {.worker_id = 1, .num_parts = 1}),
                   &bytes)
                  .ok());
  EXPECT_FALSE(waiting->done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  ASSERT_TRUE(Call(kPushMethod,
                   PushBytes(1, g2, std::nullopt, {.worker_id = 2, .num_parts = 1}),
                   &bytes)
                  .ok());
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(20)))
      << "the step completed, the PushPull was not answered";
  ASSERT_TRUE(waiting->Wait(&bytes).ok()) << waiting->status.error_message();
  proto::PullResponse resp;
  ASSERT_TRUE(resp.ParseFromString(bytes));
  EXPECT_EQ(resp.chunks_size(), static_cast<int>(map_.chunks.size()));
  std::vector<float> got, expected(init_.size());
  std::vector<int64_t> versions;
  Flatten(resp, &got, &versions);
  for (size_t i = 0; i < init_.size(); ++i) {
    expected[i] = init_[i] - (g0[i] + g1[i] + g2[i]) / 3;
  }
  EXPECT_EQ(got, expected);
  for (int64_t v : versions) EXPECT_EQ(v, 1);

  // A retry of that part is a duplicate and gets the step's values at once.
  ASSERT_TRUE(Call(kPushPullMethod,
                   PushBytes(1, g0, wire::Encoding::kRawF32,
                             {.worker_id = 0, .part = 1, .num_parts = 2,
                              .pull_min_version = 1},
                             {2, 3}),
                   &bytes)
                  .ok());
  ASSERT_TRUE(resp.ParseFromString(bytes));
  Flatten(resp, &got, &versions);
  EXPECT_EQ(got, expected);

  // pull_min_version belongs to PushPull, and is never negative.
  EXPECT_EQ(Call(kPushMethod,
                 PushBytes(2, g0, std::nullopt,
                           {.worker_id = 0, .num_parts = 1, .pull_min_version = 2}),
                 &bytes)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Call(kPushPullMethod,
                 PushBytes(2, g0, wire::Encoding::kRawF32,
                           {.worker_id = 0, .num_parts = 1, .pull_min_version = -1}),
                 &bytes)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Neither was applied: worker 0's push 2 is not a duplicate.
  ASSERT_TRUE(Call(kPushMethod,
                   PushBytes(2, g0, std::nullopt, {.worker_id = 0, .num_parts = 1}),
                   &bytes)
                  .ok());
  proto::PushResponse ack;
  ASSERT_TRUE(ack.ParseFromString(bytes));
  EXPECT_FALSE(ack.duplicate());
}

TEST_F(GrpcServiceTest, BadRequestsAreInvalidArgument) {
  Start();
  EXPECT_EQ(Declare(proto::FP16).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Declare().ok());
  std::vector<float> got;
  std::vector<int64_t> versions;
  EXPECT_EQ(Pull(&got, &versions, 9).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  std::string bytes;
  const grpc::Status garbage =
      Call(kPushMethod, std::string("\xff\xff\xff", 3), &bytes);
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(garbage.error_message().find("malformed PushRequest"),
            std::string::npos)
      << garbage.error_message();
  const std::vector<float> g(init_.size(), 1.0f);
  EXPECT_EQ(Call(kPushPullMethod,
                 PushBytes(1, g, static_cast<wire::Encoding>(9)), &bytes)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A leave goes by Push, and carries no gradients.
  proto::PushRequest leave;
  leave.set_worker_id(2);
  leave.set_leave(true);
  EXPECT_EQ(Call(kPushPullMethod, leave.SerializeAsString(), &bytes).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  proto::PushRequest leave_with_grads = leave;
  leave_with_grads.add_gradients()->set_chunk_id(0);
  EXPECT_EQ(Call(kPushMethod, leave_with_grads.SerializeAsString(), &bytes)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Call(kPushMethod, leave.SerializeAsString(), &bytes).ok());
  // Nothing above changed a value.
  ASSERT_TRUE(Pull(&got, &versions).ok());
  EXPECT_EQ(got, init_);
}

TEST_F(GrpcServiceTest, DroppedRepliesStillApplyEachPushOnce) {
  Start(/*drop_reply_every=*/2);
  ASSERT_TRUE(Declare().ok());  // Not a bulk call: never dropped.
  const std::vector<float> g1(init_.size(), 1.0f), g2(init_.size(), 2.0f);
  proto::PushResponse resp;
  ASSERT_TRUE(Push(1, g1, &resp).ok());                     // Reply 1.
  EXPECT_EQ(Push(2, g2, &resp).error_code(),                // Reply 2.
            grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Push(2, g2, &resp).ok());                     // Reply 3.
  EXPECT_TRUE(resp.duplicate());  // The dropped reply's push was applied.
  std::vector<float> got;
  std::vector<int64_t> versions;
  EXPECT_EQ(Pull(&got, &versions).error_code(),             // Reply 4.
            grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Pull(&got, &versions).ok());                  // Reply 5.
  EXPECT_EQ(got, Minus(Minus(init_, g1), g2));
}

}  // namespace
}  // namespace downpour
