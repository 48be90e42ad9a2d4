#include "server/job_control.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/job_control.grpc.pb.h"
#include "rpc/credentials.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

TEST(JobStateTest, EndsWhenEveryWorkerLeft) {
  JobState job(2, "sgd", 0.1);
  EXPECT_EQ(job.WorkerDone({2, "", ""}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(job.WorkerDone({1, "", "DONE {}"}).ok());
  EXPECT_FALSE(job.WaitForEnd(absl::ZeroDuration()).has_value());
  ASSERT_TRUE(job.WorkerDone({0, "", ""}).ok());
  auto end = job.WaitForEnd(absl::ZeroDuration());
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code, 0);
  EXPECT_THAT(end->reason, HasSubstr("workers has left"));
}

TEST(JobStateTest, FailedWorkerFailsTheJob) {
  JobState job(2, "sgd", 0.1);
  ASSERT_TRUE(job.WorkerDone({1, "out of memory", ""}).ok());
  ASSERT_TRUE(job.WorkerDone({0, "", ""}).ok());
  auto end = job.WaitForEnd(absl::ZeroDuration());
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code, 1);
  EXPECT_THAT(end->reason, HasSubstr("worker 1 failed: out of memory"));
}

TEST(JobStateTest, FirstEndWins) {
  JobState job(3, "sgd", 0.1);
  EXPECT_FALSE(job.EndJob(7, "").ok());
  ASSERT_TRUE(job.EndJob(0, "eval failed").ok());
  ASSERT_TRUE(job.EndJob(0, "").ok());
  auto end = job.WaitForEnd(absl::ZeroDuration());
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code, 1);
  EXPECT_THAT(end->reason, HasSubstr("eval failed"));
}

TEST(ApplyClusterSpecTest, ServerTakesItsEntry) {
  absl::StatusOr<ClusterSpec> spec =
      FromFlags("p0:5000,p1:5001", "w0:1,w1:2,w2:3", "ps", 1);
  ASSERT_TRUE(spec.ok());
  ParameterServerHostOptions o;
  ASSERT_TRUE(ApplyClusterSpec(*spec, "", &o).ok());
  EXPECT_EQ(o.store.shard_index, 1);
  EXPECT_EQ(o.store.num_shards, 2);
  EXPECT_EQ(o.store.num_workers, 3);
  EXPECT_EQ(o.listen_addresses[0], "p1:5001");
  ASSERT_TRUE(ApplyClusterSpec(*spec, "0.0.0.0", &o).ok());
  EXPECT_EQ(o.listen_addresses[0], "0.0.0.0:5001");
  spec = FromFlags("p0:5000", "w0:1", "worker", 0);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(ApplyClusterSpec(*spec, "", &o).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A real server with the JobControl service, called through its generated
// stub (the workers' client is tested in worker/job_end_test.cc).
TEST(JobControlServiceTest, ReportsStateAndEndsTheJob) {
  JobState job(2, "adagrad", 0.05);
  auto service = NewJobControlService(
      &job, [] { return std::string("too few workers"); }, nullptr);
  ParameterServerHostOptions o;
  o.extra_services.push_back(service.get());
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok()) << host.status();
  absl::Notification stop;
  JobEnd end;
  std::thread server_main(
      [&] { end = WaitForJobEnd(&job, *(*host)->store(), &stop); });
  auto credentials = BuildChannelCredentials(TransportSecurityOptions());
  ASSERT_TRUE(credentials.ok());
  auto stub = proto::JobControl::NewStub(
      grpc::CreateChannel((*host)->address(), *credentials));

  proto::WorkerDoneRequest bad;
  bad.set_worker_id(5);
  proto::WorkerDoneResponse done_response;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->WorkerDone(&ctx, bad, &done_response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  proto::WorkerDoneRequest done;
  done.set_worker_id(1);
  done.set_done_line("DONE {}");
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->WorkerDone(&ctx, done, &done_response).ok());
  }
  proto::JobStateResponse state;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(
        stub->GetJobState(&ctx, proto::JobStateRequest(), &state).ok());
  }
  EXPECT_EQ(state.num_workers(), 2);
  ASSERT_EQ(state.done_size(), 1);
  EXPECT_EQ(state.done(0).worker_id(), 1);
  EXPECT_EQ(state.done(0).done_line(), "DONE {}");
  EXPECT_EQ(state.optimizer(), "adagrad");
  EXPECT_DOUBLE_EQ(state.lr(), 0.05);
  EXPECT_EQ(state.aborted(), "too few workers");

  proto::EndJobRequest end_job;
  end_job.set_worker_id(0);
  proto::EndJobResponse end_response;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->EndJob(&ctx, end_job, &end_response).ok());
  }
  server_main.join();
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_THAT(end.reason, HasSubstr("worker 0 ended the job"));
}

TEST(JobControlServiceTest, SignalStopsWithoutEnd) {
  JobState job(1, "sgd", 0.1);
  ParameterServerHostOptions o;
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok());
  absl::Notification stop;
  stop.Notify();
  const JobEnd end = WaitForJobEnd(&job, *(*host)->store(), &stop);
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_THAT(end.reason, HasSubstr("signal"));
}

}  // namespace
}  // namespace downpour
