#include "common/process_setup.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

// Sends `sig` to the process (kill(2), as a shell or a launcher does): it
// reaches the StopSignal's thread, the only one that does not block it.
void SignalProcess(int sig) { ASSERT_EQ(kill(getpid(), sig), 0); }

// Waits until `flag` reads `want`; false after 10 s.
bool Eventually(const std::atomic<int>* flag, int want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (flag->load() != want) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

bool Blocks(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

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

  SignalProcess(SIGTERM);  // Would kill the test without the handler.
  ASSERT_TRUE((*stop)->stopped().WaitForNotificationWithTimeout(
      absl::Seconds(10)));
  EXPECT_TRUE((*stop)->requested()->load());
  EXPECT_EQ((*stop)->signal_number()->load(), SIGTERM);
  EXPECT_EQ(on_stop_calls.load(), 1);
  EXPECT_EQ(on_stop_signal.load(), SIGTERM);

  // A second signal is recorded; the stop has happened already.
  SignalProcess(SIGINT);
  EXPECT_TRUE(Eventually((*stop)->signal_number(), SIGINT));
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
  SignalProcess(SIGINT);
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
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
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

// The threads started after Install block the stop signals, so that a
// thread waiting in a library (gRPC's pollers) is never the one picked to run
// the handler; the watcher takes them. Destroyed, the installer's mask is as
// before.
TEST(StopSignalTest, ThreadsStartedAfterInstallLeaveTheSignalToTheWatcher) {
  ASSERT_FALSE(Blocks(SIGTERM));
  ASSERT_FALSE(Blocks(SIGINT));
  {
    auto stop = StopSignal::Install();
    ASSERT_TRUE(stop.ok()) << stop.status();
    EXPECT_TRUE(Blocks(SIGTERM));
    EXPECT_TRUE(Blocks(SIGINT));
    // A thread asleep in a wait with no timeout, as gRPC's pollers are: the
    // signal must not interrupt it, and the stop still happens.
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::atomic<bool> blocks_term{false};
    std::atomic<int> interrupted{0};
    std::thread sleeper([&] {
      blocks_term.store(Blocks(SIGTERM));
      for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, -1) < 0) {
          interrupted.fetch_add(1);
          continue;
        }
        return;
      }
    });
    absl::SleepFor(absl::Milliseconds(50));
    SignalProcess(SIGTERM);
    ASSERT_TRUE((*stop)->stopped().WaitForNotificationWithTimeout(
        absl::Seconds(10)));
    ASSERT_EQ(write(fds[1], "x", 1), 1);
    sleeper.join();
    close(fds[0]);
    close(fds[1]);
    EXPECT_TRUE(blocks_term.load());
    EXPECT_EQ(interrupted.load(), 0);
    EXPECT_EQ((*stop)->signal_number()->load(), SIGTERM);
  }
  EXPECT_FALSE(Blocks(SIGTERM));
  EXPECT_FALSE(Blocks(SIGINT));
}

// A signal the installer had blocked already stays blocked after.
TEST(StopSignalTest, KeepsABlockThatWasThereBefore) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, nullptr), 0);
  {
    auto stop = StopSignal::Install();
    ASSERT_TRUE(stop.ok()) << stop.status();
  }
  EXPECT_TRUE(Blocks(SIGTERM));
  EXPECT_FALSE(Blocks(SIGINT));
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &term, nullptr), 0);
}

}  // namespace
}  // namespace downpour
