#include "rpc/call_window.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

// Completes calls on threads of their own, as gRPC completes RPCs.
class AsyncCalls {
 public:
  ~AsyncCalls() { JoinAll(); }
  void Run(std::function<void()> f) {
    absl::MutexLock l(&mu_);
    threads_.emplace_back(std::move(f));
  }
  void JoinAll() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock l(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

std::vector<int> Iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(CallWindowTest, AtMostWindowInFlightPerLaneAndEveryCallOnce) {
  constexpr int kLanes = 3, kCalls = 30, kWindow = 2;
  absl::Mutex mu;
  std::map<int, int> in_flight, most;
  std::map<int, std::vector<int>> order;
  AsyncCalls async;
  const std::vector<int> skipped = RunWindowed(
      Iota(kCalls), [](int i) { return i % kLanes; }, kWindow, nullptr,
      [&](int i, WindowSlot slot) {
        {
          absl::MutexLock l(&mu);
          const int lane = i % kLanes;
          most[lane] = std::max(most[lane], ++in_flight[lane]);
          order[lane].push_back(i);
        }
        async.Run([&, i, slot] {
          absl::SleepFor(absl::Milliseconds(2));
          {
            absl::MutexLock l(&mu);
            --in_flight[i % kLanes];
          }
          slot.Done();
        });
      });
  EXPECT_TRUE(skipped.empty());
  for (int lane = 0; lane < kLanes; ++lane) {
    EXPECT_EQ(most[lane], kWindow) << lane;
    // Every call once. (Two completing at once may record their successors
    // in either order; with a window of 1 the order is strict, below.)
    std::vector<int> want;
    for (int i = lane; i < kCalls; i += kLanes) want.push_back(i);
    std::sort(order[lane].begin(), order[lane].end());
    EXPECT_EQ(order[lane], want) << lane;
  }
}

TEST(CallWindowTest, NoLimitStartsEveryCallBeforeAnyCompletes) {
  constexpr int kCalls = 12;
  absl::Mutex mu;
  std::vector<WindowSlot> slots;
  AsyncCalls async;
  // Completes everything only once all calls have started; with a limit in
  // the way it would give up after 10 s and the check below would fail.
  async.Run([&] {
    absl::MutexLock l(&mu);
    mu.AwaitWithTimeout(absl::Condition(
                            +[](std::vector<WindowSlot>* s) {
                              return s->size() == kCalls;
                            },
                            &slots),
                        absl::Seconds(10));
    EXPECT_EQ(slots.size(), kCalls);
    for (const WindowSlot& s : slots) s.Done();
  });
  RunWindowed(Iota(kCalls), [](int) { return 0; }, /*window=*/0, nullptr,
              [&](int, WindowSlot slot) {
                absl::MutexLock l(&mu);
                slots.push_back(slot);
              });
  absl::MutexLock l(&mu);
  EXPECT_EQ(slots.size(), kCalls);
}

TEST(CallWindowTest, CallsThatCompleteInsideStartStillRunInTurn) {
  std::vector<int> order;
  const std::vector<int> skipped = RunWindowed(
      Iota(200), [](int) { return 0; }, /*window=*/1, nullptr,
      [&](int i, WindowSlot slot) {
        order.push_back(i);
        slot.Done();
        slot.Done();  // Idempotent.
      });
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(order, Iota(200));
}

TEST(CallWindowTest, ReleaseStartsTheNextCallBeforeDone) {
  std::atomic<bool> second_started{false};
  bool seen_before_done = false;
  AsyncCalls async;
  RunWindowed(Iota(2), [](int) { return 0; }, /*window=*/1, nullptr,
              [&](int i, WindowSlot slot) {
                if (i == 1) {
                  second_started = true;
                  async.Run([slot] { slot.Done(); });
                  return;
                }
                async.Run([&, slot] {
                  slot.Release();
                  seen_before_done = second_started.load();
                  slot.Done();
                });
              });
  EXPECT_TRUE(seen_before_done);
}

TEST(CallWindowTest, StopSkipsQueuedCallsAndReturnsThem) {
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<int> started;
  AsyncCalls async;
  std::vector<int> skipped = RunWindowed(
      Iota(6), [](int i) { return i % 2; }, /*window=*/1, &stop,
      [&](int i, WindowSlot slot) {
        {
          absl::MutexLock l(&mu);
          started.push_back(i);
        }
        async.Run([&, i, slot] {
          if (i == 0) stop = true;  // Lane 0 fails: nothing more starts.
          // Lane 1's first call waits for that, so it cannot start more.
          while (!stop) absl::SleepFor(absl::Milliseconds(1));
          slot.Done();
        });
      });
  async.JoinAll();
  std::sort(started.begin(), started.end());
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(started, (std::vector<int>{0, 1}));
  EXPECT_EQ(skipped, (std::vector<int>{2, 3, 4, 5}));
}

}  // namespace
}  // namespace downpour
