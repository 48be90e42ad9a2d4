// A shard's whole life in process, on loopback, through real gRPC clients:
// the port file, the final snapshot on stop and the restore from it by the
// next server, start failures, and a job from a cluster spec that ends when
// job control says so.
#include "server/shard_server.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/job_control.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/rpc_convert.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  auto credentials = BuildChannelCredentials(TransportSecurityOptions());
  EXPECT_TRUE(credentials.ok());
  return grpc::CreateChannel(address, *credentials);
}

// A fresh folder under the test's scratch directory.
std::string FreshDir(const std::string& name) {
  const std::string dir = TestTmpPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// One shard of a 4-float model, sgd at rate 1: a push of g turns v into
// exactly v - g. Snapshots only on stop.
ShardServerOptions Options(const std::string& checkpoint_dir,
                           const std::string& port_file) {
  ShardServerOptions o;
  o.host.store.optimizer.name = "sgd";
  o.host.store.optimizer.learning_rate = 1;
  o.snapshots.dir = checkpoint_dir;
  o.snapshots.every = absl::ZeroDuration();
  o.port_file = port_file;
  return o;
}

// A real client of one shard's ParameterServer service.
class ShardClient {
 public:
  explicit ShardClient(const std::string& address)
      : stub_(proto::ParameterServer::NewStub(ChannelTo(address))) {}

  grpc::Status Declare(const std::vector<float>& initial) {
    ModelLayout layout;
    layout.tensors = {{"w", {static_cast<int64_t>(initial.size())}}};
    layout.num_shards = 1;
    proto::DeclareModelRequest req;
    LayoutToProto(layout, req.mutable_layout());
    proto::ChunkValues* c = req.add_initial();
    c->set_chunk_id(0);
    c->set_data(Bytes(initial));
    grpc::ClientContext ctx;
    proto::DeclareModelResponse resp;
    return stub_->DeclareModel(&ctx, req, &resp);
  }

  grpc::Status Push(int64_t seq, const std::vector<float>& grad) {
    proto::PushRequest req;
    req.set_worker_id(0);
    req.set_seq(seq);
    proto::ChunkGradient* g = req.add_gradients();
    g->set_chunk_id(0);
    g->set_data(Bytes(grad));
    grpc::ClientContext ctx;
    proto::PushResponse resp;
    return stub_->Push(&ctx, req, &resp);
  }

  // Chunk 0's values and version.
  grpc::Status Pull(std::vector<float>* values, int64_t* version) {
    proto::PullRequest req;
    req.add_chunk_ids(0);
    grpc::ClientContext ctx;
    proto::PullResponse resp;
    grpc::Status s = stub_->Pull(&ctx, req, &resp);
    if (!s.ok()) return s;
    if (resp.chunks_size() != 1) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "not one chunk");
    }
    const std::string& data = resp.chunks(0).data();
    values->resize(data.size() / sizeof(float));
    std::memcpy(values->data(), data.data(), values->size() * sizeof(float));
    *version = resp.chunks(0).version();
    return s;
  }

 private:
  static std::string Bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()),
                       v.size() * sizeof(float));
  }

  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

TEST(ShardServerTest, FinalSnapshotOnStopIsRestoredByTheNextServer) {
  const std::string dir = FreshDir("restore_ckpt");
  const std::string port_file = TestTmpPath("restore_first.port");
  {
    auto server = ShardServer::Create(Options(dir, port_file));
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_GT((*server)->port(), 0);
    EXPECT_EQ(ReadBytes(port_file), absl::StrCat((*server)->port(), "\n"));
    ShardClient client((*server)->address());
    ASSERT_TRUE(client.Declare({1, 2, 3, 4}).ok());
    ASSERT_TRUE(client.Push(1, {0.5f, 0.5f, 0.5f, 0.5f}).ok());
    absl::Notification stop;
    stop.Notify();
    EXPECT_EQ((*server)->Run(stop), 0);
    // Stopped: no more calls, and the final snapshot is on disk.
    std::vector<float> values;
    int64_t version = 0;
    EXPECT_FALSE(client.Pull(&values, &version).ok());
    EXPECT_EQ((*server)->store()->Stats().snapshots_written, 1);
  }
  EXPECT_FALSE(std::filesystem::is_empty(dir));

  const std::string second_port_file = TestTmpPath("restore_second.port");
  auto server = ShardServer::Create(Options(dir, second_port_file));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ReadBytes(second_port_file),
            absl::StrCat((*server)->port(), "\n"));
  EXPECT_GT((*server)->store()->Stats().last_snapshot_unix_s, 0);
  ShardClient client((*server)->address());
  std::vector<float> values;
  int64_t version = -1;
  ASSERT_TRUE(client.Pull(&values, &version).ok());
  EXPECT_EQ(values, std::vector<float>({0.5f, 1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(version, 1);
  // It goes on from there.
  ASSERT_TRUE(client.Push(2, {0.5f, 0.5f, 0.5f, 0.5f}).ok());
  ASSERT_TRUE(client.Pull(&values, &version).ok());
  EXPECT_EQ(values, std::vector<float>({0, 1, 2, 3}));
  EXPECT_EQ(version, 2);
}

TEST(ShardServerTest, WithoutACheckpointDirNothingIsWritten) {
  auto server = ShardServer::Create(Options("", ""));
  ASSERT_TRUE(server.ok()) << server.status();
  ShardClient client((*server)->address());
  ASSERT_TRUE(client.Declare({1, 2}).ok());
  absl::Notification stop;
  std::thread stopper([&stop] { stop.Notify(); });
  EXPECT_EQ((*server)->Run(stop), 0);
  stopper.join();
  EXPECT_EQ((*server)->store()->Stats().snapshots_written, 0);
}

TEST(ShardServerTest, StartFailuresSayWhy) {
  // The port file cannot be written.
  auto bad_file = ShardServer::Create(
      Options("", TestTmpPath("no_such_dir/sub/port")));
  EXPECT_EQ(bad_file.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(bad_file.status().message()),
              StartsWith("could not write --port_file "));

  // The address is taken: the probe says why.
  auto first = ShardServer::Create(Options("", ""));
  ASSERT_TRUE(first.ok()) << first.status();
  ShardServerOptions same = Options("", "");
  same.host.listen_addresses = {(*first)->address()};
  auto second = ShardServer::Create(same);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("cannot listen on ", (*first)->address())));

  // A bad option.
  ShardServerOptions bad_store = Options("", "");
  bad_store.host.store.num_shards = 0;
  EXPECT_EQ(ShardServer::Create(bad_store).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A job from a cluster spec: job control reports the as-given rate and the
// shard's Run returns when the chief ends the job, failed here (exit 1).
TEST(ShardServerTest, SpecJobEndsWhenTheChiefEndsIt) {
  absl::StatusOr<ClusterSpec> spec =
      FromFlags("127.0.0.1:1", "127.0.0.1:2", "ps", 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ShardServerOptions o = Options(FreshDir("spec_ckpt"), "");
  o.spec = *spec;
  o.host.store.num_workers = 1;
  o.lr = 0.25;  // As given; the store's rate is 1.
  auto server = ShardServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Notification stop;  // Never notified: the job ends it.
  int exit_code = -1;
  std::thread run([&] { exit_code = (*server)->Run(stop); });

  auto job = proto::JobControl::NewStub(ChannelTo((*server)->address()));
  proto::JobStateResponse state;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(job->GetJobState(&ctx, proto::JobStateRequest(), &state).ok());
  }
  EXPECT_EQ(state.num_workers(), 1);
  EXPECT_EQ(state.optimizer(), "sgd");
  EXPECT_DOUBLE_EQ(state.lr(), 0.25);
  EXPECT_EQ(state.aborted(), "");
  proto::EndJobRequest end;
  end.set_worker_id(0);
  end.set_error("eval failed");
  {
    grpc::ClientContext ctx;
    proto::EndJobResponse resp;
    ASSERT_TRUE(job->EndJob(&ctx, end, &resp).ok());
  }
  run.join();
  EXPECT_EQ(exit_code, 1);
  EXPECT_FALSE(stop.HasBeenNotified());
}

// The same job stopped by a signal instead: exit 0.
TEST(ShardServerTest, SpecJobStoppedBeforeItsEnd) {
  absl::StatusOr<ClusterSpec> spec =
      FromFlags("127.0.0.1:1", "127.0.0.1:2", "ps", 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ShardServerOptions o = Options("", "");
  o.spec = *spec;
  o.host.store.num_workers = 1;
  auto server = ShardServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Notification stop;
  stop.Notify();
  EXPECT_EQ((*server)->Run(stop), 0);
}

}  // namespace
}  // namespace downpour
