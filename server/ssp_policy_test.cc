// Tests of the ssp step policy (server/ssp_policy.h) through ParameterStore's public API.
#include "server/parameter_store.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using namespace store_test;  // NOLINT: test helpers only.

TEST(SspModeTest, PullWaitsWhileAheadOfTheBound) {
  auto f = NewModeStore(TrainMode::kSsp, 2, 0, 1, absl::Seconds(30), /*s=*/1);
  // Worker 0 runs ahead: clock 2 while worker 1 is at 0.
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*f->store, 0, 2, 1.0f, 1).ok());
  auto ahead = StartPull(*f->store, 0, /*clock=*/2);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(ahead->done.HasBeenNotified());  // 0 < 2 - 1
  auto within = StartPull(*f->store, 0, /*clock=*/1);
  EXPECT_TRUE(within->done.HasBeenNotified());  // 0 >= 1 - 1
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 1.0f, 0).ok());
  ASSERT_TRUE(ahead->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(ahead->status.ok());
  EXPECT_EQ(f->store->Stats().ssp_max_lead, 1);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -3.0f));  // applied on arrival
}

TEST(SspModeTest, StalledWorkerIsEvictedAfterTimeout) {
  auto f = NewModeStore(TrainMode::kSsp, 2, 0, 1, absl::Milliseconds(150), 0);
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*f->store, 0, 1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok());
  EXPECT_EQ(f->store->Stats().evicted_workers, std::vector<int32_t>{1});
}

// A laggard not heard from yet may still be starting: it holds the worker
// ahead of it up to the join timeout, not the sync timeout.
TEST(SspModeTest, ALaggardNotHeardFromYetIsWaitedForUpToTheJoinTimeout) {
  auto f = NewModeStore(TrainMode::kSsp, 2, 0, 1, absl::Milliseconds(100), 0,
                        /*join_timeout=*/absl::Seconds(60));
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*f->store, 0, 1);
  absl::SleepFor(absl::Milliseconds(600));  // Six sync timeouts.
  EXPECT_FALSE(waiting->done.HasBeenNotified()) << waiting->status;
  EXPECT_TRUE(f->store->Stats().evicted_workers.empty());
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 1.0f, 0).ok());
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
  EXPECT_TRUE(f->store->Stats().evicted_workers.empty());
}

// A pull for a clock no active worker has reached (here on a fresh job) is
// answered DEADLINE_EXCEEDED after the timeout; it evicts nobody (it used to
// evict every worker and abort the job). A clock absurdly ahead is refused
// at once.
TEST(SspModeTest, PullNoWorkerStandsBehindEndsAtTheTimeoutEvictingNobody) {
  auto f = NewModeStore(TrainMode::kSsp, 2, 0, 1, absl::Milliseconds(200), 0);
  auto absurd = StartPull(*f->store, 0, /*clock=*/1000000000);
  ASSERT_TRUE(absurd->done.HasBeenNotified());
  EXPECT_EQ(absurd->status.code(), absl::StatusCode::kInvalidArgument)
      << absurd->status;
  auto waiting = StartPull(*f->store, 0, /*clock=*/1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(3)))
      << "the pull outlived the sync timeout";
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kDeadlineExceeded)
      << waiting->status;
  EXPECT_NE(waiting->status.message().find("clock 1"), std::string::npos)
      << waiting->status;
  ShardStats s = f->store->Stats();
  EXPECT_TRUE(s.evicted_workers.empty());
  EXPECT_TRUE(s.aborted.empty()) << s.aborted;
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
}

TEST(PushPartsTest, SspClockAdvancesOncePerWholePush) {
  auto f = NewModeStore(TrainMode::kSsp, 2, 0, 1, absl::Seconds(30), /*s=*/0);
  TinyPart a0 = PartOf(0, 1.0f, 0), a1 = PartOf(1, 1.0f, 0);
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 0, 2}, a0.chunks).ok());
  // Worker 0 at clock 1 may not pull while worker 1 has only half a push.
  auto waiting = StartPull(*f->store, 0, /*clock=*/1);
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  EXPECT_FALSE(waiting->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 1, 2}, a1.chunks).ok());
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
}

// The two parts of each push arrive on two threads at once. A pull waiting
// for the push (worker_clock) is answered only once both parts are applied,
// whichever the store claimed last: it reads the whole push.
TEST(PushPartsTest, SspPullWaitingForAPushReadsAllItsParts) {
  auto f = NewModeStore(TrainMode::kSsp, 1, 0, 1, absl::Seconds(30), /*s=*/0);
  // The race is narrow: many rounds.
  constexpr int64_t kPushes = 40000;
  std::vector<float> values;
  std::unique_ptr<absl::Notification> answered;
  const int64_t torn = RacePushParts(
      *f->store, kPushes, [](int64_t) { return 0; },
      [&](int64_t seq) {
        values.clear();
        answered = std::make_unique<absl::Notification>();
        PullSpec spec;
        spec.worker_id = 0;
        spec.worker_clock = seq;  // Waits for this push (staleness 0).
        f->store->PullWhenReady(
            spec,
            [&](const ChunkView& c) {
              values.insert(values.end(), c.data, c.data + c.num_elements);
            },
            [&](absl::Status st) {
              EXPECT_TRUE(st.ok()) << st;
              answered->Notify();
            });
      },
      [&](int64_t seq) {
        return answered->WaitForNotificationWithTimeout(absl::Seconds(10)) &&
               values == std::vector<float>(6, -1.0f * seq);
      });
  EXPECT_EQ(torn, 0) << "the pull waiting for push " << torn
                     << " read it half applied: "
                     << testing::PrintToString(values);
}
}  // namespace
}  // namespace downpour
