#include "worker/job_thread.h"

#include <atomic>

#include "absl/synchronization/notification.h"
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
