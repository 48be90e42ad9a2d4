// Checks, under --config=tsan, that ThreadSanitizer sees the synchronization
// of Debian's uninstrumented abseil and gRPC (absl_sync_annotations.cc,
// grpc_annotations.cc) and still reports a real race. Skipped in other builds.
//
// The synchronized cases pass only if TSan reports nothing (a report ends the
// process: halt_on_error). The race cases run this binary again as a child
// (one test each) and expect TSan's report and exit code 66.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

#define SKIP_WITHOUT_TSAN() \
  if (!kTsan) GTEST_SKIP() << "only meaningful under --config=tsan"

// Plain (non-atomic) data handed between threads only through abseil.
struct Shared {
  absl::Mutex mu;
  absl::CondVar cv;
  long value ABSL_GUARDED_BY(mu) = 0;
  bool ready ABSL_GUARDED_BY(mu) = false;
};

TEST(TsanAnnotationsTest, MutexLockOrdersPlainWrites) {
  SKIP_WITHOUT_TSAN();
  Shared s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s] {
      for (int i = 0; i < 1000; ++i) {
        absl::MutexLock l(&s.mu);
        ++s.value;
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::MutexLock l(&s.mu);
  EXPECT_EQ(s.value, 4000);
}

TEST(TsanAnnotationsTest, ReaderLockOrdersAfterWriter) {
  SKIP_WITHOUT_TSAN();
  Shared s;
  std::thread writer([&s] {
    for (int i = 0; i < 500; ++i) {
      absl::MutexLock l(&s.mu);
      ++s.value;
    }
  });
  long seen = 0;
  for (int i = 0; i < 500; ++i) {
    absl::ReaderMutexLock l(&s.mu);
    seen = s.value;
  }
  writer.join();
  EXPECT_LE(seen, 500);
}

TEST(TsanAnnotationsTest, AwaitConditionAndCondVarHandOff) {
  SKIP_WITHOUT_TSAN();
  Shared s;
  std::vector<long> payload;  // Unguarded: published by the handoff only.
  std::thread producer([&] {
    payload.assign(100, 7);
    absl::MutexLock l(&s.mu);
    s.ready = true;
    s.cv.Signal();
  });
  {
    absl::MutexLock l(&s.mu);
    while (!s.ready) s.cv.Wait(&s.mu);
  }
  EXPECT_EQ(payload.size(), 100u);
  producer.join();

  // A condition evaluated by whichever thread unlocks, reading the waiter's
  // stack (the lambda) and the guarded value.
  std::thread incrementer([&s] {
    for (int i = 0; i < 50; ++i) {
      absl::MutexLock l(&s.mu);
      ++s.value;
    }
  });
  const long target = 50;
  auto reached = [&s, target] {
    s.mu.AssertReaderHeld();
    return s.value >= target;
  };
  {
    absl::MutexLock l(&s.mu);
    EXPECT_TRUE(s.mu.AwaitWithTimeout(absl::Condition(&reached),
                                      absl::Seconds(30)));
    s.value = 0;  // A write after the waits, against the condition's reads.
  }
  incrementer.join();
}

TEST(TsanAnnotationsTest, NotificationPublishesPlainData) {
  SKIP_WITHOUT_TSAN();
  for (int round = 0; round < 20; ++round) {
    absl::Notification done;
    std::string message;
    std::thread t([&] {
      message = "hello from round " + std::to_string(round);
      done.Notify();
    });
    if (round % 2 == 0) {
      done.WaitForNotification();
    } else {
      while (!done.HasBeenNotified()) std::this_thread::yield();
    }
    EXPECT_EQ(message.substr(0, 5), "hello");
    t.join();
  }
}

// The two racing writes of the tests below happen while both threads are
// inside: each waits, through relaxed atomics (which order nothing for
// TSan), for the other's write before leaving its critical section. So no
// lock handed over between them can order the pair, however the threads
// are scheduled (on a loaded machine the thread could otherwise finish
// before the main thread's write).
struct Handshake {
  std::atomic<bool> first{false}, second{false};
  static void Await(const std::atomic<bool>& f) {
    while (!f.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
};

// Run only as a child of RealRacesAreStillReported.
TEST(TsanAnnotationsTest, DISABLED_RaceWhereOnlyOneSideLocks) {
  Shared s;
  long unguarded = 0;
  Handshake h;
  std::thread t([&] {
    absl::MutexLock l(&s.mu);
    unguarded = 1;
    h.first.store(true, std::memory_order_relaxed);
    Handshake::Await(h.second);
  });
  Handshake::Await(h.first);
  unguarded = 2;  // No lock here: TSan must report this pair.
  h.second.store(true, std::memory_order_relaxed);
  t.join();
  absl::SleepFor(absl::Milliseconds(1));
  std::printf("value %ld\n", unguarded);
}

// Run only as a child of RealRacesAreStillReported.
TEST(TsanAnnotationsTest, DISABLED_RaceAcrossTwoMutexes) {
  absl::Mutex a, b;
  long value = 0;
  Handshake h;
  std::thread t([&] {
    absl::MutexLock l(&a);
    value = 1;
    h.first.store(true, std::memory_order_relaxed);
    Handshake::Await(h.second);
  });
  {
    absl::MutexLock l(&b);
    Handshake::Await(h.first);
    value = 2;  // Another mutex orders nothing: TSan must report.
    h.second.store(true, std::memory_order_relaxed);
  }
  t.join();
  std::printf("value %ld\n", value);
}

// Runs one DISABLED_ test of this binary in a child process; returns its
// exit status and what it printed.
int RunChild(const std::string& test, std::string* output) {
  // The child must not touch the parent's Bazel result files.
  const std::string cmd =
      "env -u XML_OUTPUT_FILE -u GTEST_OUTPUT -u TEST_PREMATURE_EXIT_FILE "
      "-u TEST_SHARD_STATUS_FILE TSAN_OPTIONS=halt_on_error=0:exitcode=66 "
      "/proc/" +
      std::to_string(getpid()) +
      "/exe --gtest_also_run_disabled_tests "
      "--gtest_filter=TsanAnnotationsTest." +
      test + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TsanAnnotationsTest, RealRacesAreStillReported) {
  SKIP_WITHOUT_TSAN();
  for (const char* test :
       {"DISABLED_RaceWhereOnlyOneSideLocks", "DISABLED_RaceAcrossTwoMutexes"}) {
    std::string output;
    EXPECT_EQ(RunChild(test, &output), 66) << test << ":\n" << output;
    EXPECT_NE(output.find("WARNING: ThreadSanitizer: data race"),
              std::string::npos)
        << test << ":\n"
        << output;
  }
}

}  // namespace
