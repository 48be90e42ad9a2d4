#include "worker/job_thread.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(JobThreadTest, WaitWithoutJobIsOk) {
  JobThread t;
  EXPECT_TRUE(t.Wait().ok());
  EXPECT_FALSE(t.Finished());
}

TEST(JobThreadTest, RunsJobsInTurnAndReturnsTheirStatus) {
  JobThread t;
  int runs = 0;
  t.Start([&] {
    ++runs;
    return absl::OkStatus();
  });
  EXPECT_TRUE(t.Wait().ok());
  t.Start([&] {
    ++runs;
    return absl::InternalError("boom");
  });
  absl::Status s = t.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(runs, 2);
  // Waiting again after the job was collected does not repeat its status.
  EXPECT_TRUE(t.Wait().ok());
}

TEST(JobThreadTest, FinishedTurnsTrueOnlyWhenTheJobIsDone) {
  JobThread t;
  absl::Notification release;
  t.Start([&] {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  EXPECT_FALSE(t.Finished());
  release.Notify();
  while (!t.Finished()) {
  }
  EXPECT_TRUE(t.Wait().ok());
  EXPECT_FALSE(t.Finished());
}

TEST(JobThreadTest, WaitFinishedWaitsUpToItsTimeout) {
  JobThread t;
  EXPECT_FALSE(t.WaitFinished(absl::Milliseconds(1)));  // No job.
  absl::Notification release;
  t.Start([&] {
    release.WaitForNotification();
    return absl::InternalError("done");
  });
  const absl::Time start = absl::Now();
  EXPECT_FALSE(t.WaitFinished(absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  release.Notify();
  EXPECT_TRUE(t.WaitFinished(absl::Seconds(60)));
  // The status is still Wait's to collect.
  EXPECT_EQ(t.Wait().code(), absl::StatusCode::kInternal);
}

TEST(JobThreadTest, DestructorWaitsForARunningJob) {
  std::atomic<bool> ran{false};
  {
    JobThread t;
    t.Start([&] {
      ran = true;
      return absl::OkStatus();
    });
  }
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace downpour
