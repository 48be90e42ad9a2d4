#include "server/job_control.h"

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/ps_host.h"
#include "worker/job_end.h"

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

// A real server with the JobControl service, and the workers' client.
TEST(JobControlServiceTest, WorkersReportChiefEndsServerExits) {
  JobState job(2, "adagrad", 0.05);
  auto service =
      NewJobControlService(&job, [] { return std::string(); }, nullptr);
  ParameterServerHostOptions o;
  o.extra_services.push_back(service.get());
  auto host = ParameterServerHost::Create(o);
  ASSERT_TRUE(host.ok()) << host.status();
  absl::Notification stop;
  JobEnd end;
  std::thread server_main([&] { end = WaitForJobEnd(&job, *(*host)->store(), &stop); });

  auto worker1 = JobEndClient::Create({(*host)->address()}, {}, absl::Seconds(5));
  ASSERT_TRUE(worker1.ok());
  auto chief = JobEndClient::Create({(*host)->address()}, {}, absl::Seconds(5));
  ASSERT_TRUE(chief.ok());
  // Nothing reported yet: the chief times out naming worker 1.
  auto early = (*chief)->WaitForWorkers(0, absl::Milliseconds(100));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(early.status().message(), HasSubstr("workers 1"));
  EXPECT_EQ((*worker1)->ReportWorkerDone(5, absl::OkStatus(), "").code(),
            absl::StatusCode::kInvalidArgument);
  DoneReport d;
  d.worker = 1;
  d.steps = 10;
  d.examples = 640;
  ASSERT_TRUE((*worker1)->ReportWorkerDone(1, absl::OkStatus(),
                                           FormatDoneLine(d)).ok());
  auto reports = (*chief)->WaitForWorkers(0, absl::Seconds(5));
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->done.size(), 1u);
  EXPECT_EQ(reports->done[0].examples, 640);
  EXPECT_EQ(reports->optimizer, "adagrad");
  EXPECT_DOUBLE_EQ(reports->lr, 0.05);
  ASSERT_TRUE((*chief)->EndJob(0, "").ok());
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
