#include "common/process_setup.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(ProcessSetupTest, SetUpAndSelfExePath) {
  SetUpProcess();
  const std::string self = SelfExePath();
  ASSERT_FALSE(self.empty());
  EXPECT_EQ(self.front(), '/');
  EXPECT_NE(self.find("process_setup_test"), std::string::npos) << self;
}

TEST(StopSignalTest, SigtermNotifiesWaitersAndSetsTheFlags) {
  std::atomic<int> on_stop_calls{0};
  std::atomic<int> on_stop_signal{0};
  StopSignal::Options o;
  o.on_stop = [&](int sig) {
    on_stop_signal.store(sig);
    on_stop_calls.fetch_add(1);
  };
  absl::StatusOr<std::unique_ptr<StopSignal>> stop = StopSignal::Install(o);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_FALSE((*stop)->requested()->load());
  EXPECT_EQ((*stop)->signal_number()->load(), 0);
  EXPECT_FALSE((*stop)->stopped().HasBeenNotified());

  ASSERT_EQ(raise(SIGTERM), 0);  // Would kill the test without the handler.
  ASSERT_TRUE((*stop)->stopped().WaitForNotificationWithTimeout(
      absl::Seconds(10)));
  EXPECT_TRUE((*stop)->requested()->load());
  EXPECT_EQ((*stop)->signal_number()->load(), SIGTERM);
  EXPECT_EQ(on_stop_calls.load(), 1);
  EXPECT_EQ(on_stop_signal.load(), SIGTERM);

  // A second signal is recorded; the stop has happened already.
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ((*stop)->signal_number()->load(), SIGINT);
  stop->reset();
  EXPECT_EQ(on_stop_calls.load(), 1);
}

TEST(StopSignalTest, OnePerProcessAndDispositionsRestored) {
  struct sigaction before = {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
  {
    auto first = StopSignal::Install();
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(StopSignal::Install().status().code(),
              absl::StatusCode::kFailedPrecondition);
    struct sigaction during = {};
    ASSERT_EQ(sigaction(SIGINT, nullptr, &during), 0);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  struct sigaction after = {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);

  // A new one starts from a clean state, with no stale wake-up.
  auto again = StopSignal::Install();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->requested()->load());
  EXPECT_FALSE((*again)->stopped().WaitForNotificationWithTimeout(
      absl::Milliseconds(100)));
  ASSERT_EQ(raise(SIGINT), 0);
  ASSERT_TRUE((*again)->stopped().WaitForNotificationWithTimeout(
      absl::Seconds(10)));
  EXPECT_EQ((*again)->signal_number()->load(), SIGINT);
}

// A child forked before it resets its handlers (deploy/subprocess.cc) gets a
// signal: its parent's stop is not requested.
TEST(StopSignalTest, ForkedChildDoesNotStopTheParent) {
  auto stop = StopSignal::Install();
  ASSERT_TRUE(stop.ok()) << stop.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    raise(SIGTERM);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_FALSE((*stop)->stopped().WaitForNotificationWithTimeout(
      absl::Milliseconds(200)));
  EXPECT_FALSE((*stop)->requested()->load());
}

}  // namespace
}  // namespace downpour
