// The workers' side of a job that ends by itself, against a real server
// with the JobControl service (server/job_control.h).
#include "worker/job_end.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_control.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

TEST(JobEndClientTest, WorkersReportChiefEndsServerExits) {
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

}  // namespace
}  // namespace downpour
