// Tests of the sync step policy (server/sync_policy.h) through ParameterStore's public API.
#include "server/parameter_store.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using namespace store_test;  // NOLINT: test helpers only.

TEST(SyncModeTest, StepIsTheMeanAppliedOnceWhenAllArrive) {
  auto f = NewModeStore(TrainMode::kSync, 3);
  auto waiting = StartPull(*f->store, 1, -1);
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*f->store, 2, 1, 3.0f, 0).ok());
  int64_t v = -1;
  EXPECT_EQ(Values(*f->store, &v), std::vector<float>(6, 0.0f));
  EXPECT_EQ(v, 0);
  EXPECT_FALSE(waiting->done.HasBeenNotified());
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 2.0f, 0).ok());
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(waiting->status.ok());
  EXPECT_EQ(waiting->version, 1);
  EXPECT_EQ(Values(*f->store, &v), std::vector<float>(6, -2.0f));
  EXPECT_EQ(v, 1);
  EXPECT_EQ(f->store->Stats().steps, 1);
  // A gradient computed from step 0 now is stale: dropped and counted.
  auto late = PushConst(*f->store, 0, 2, 100.0f, 0);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->dropped);
  EXPECT_EQ(f->store->Stats().dropped_stale, 1);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -2.0f));
}

TEST(SyncModeTest, BackupWorkersCompleteWithFirstK) {
  auto f = NewModeStore(TrainMode::kSync, 3, /*k=*/2);
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 2.0f, 0).ok());
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 4.0f, 0).ok());
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -3.0f));
  auto straggler = PushConst(*f->store, 2, 1, 50.0f, 0);
  ASSERT_TRUE(straggler.ok());
  EXPECT_TRUE(straggler->dropped);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -3.0f));
}

TEST(SyncModeTest, MissingWorkerIsEvictedAfterTimeoutNotAHang) {
  auto f = NewModeStore(TrainMode::kSync, 3, 0, 1, absl::Milliseconds(200));
  // Pushes first, then the pull (see EvictionIsLoggedOutsideTheStoreLocks).
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 3.0f, 0).ok());
  auto waiting = StartPull(*f->store, 1, -1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -2.0f));
  ShardStats s = f->store->Stats();
  EXPECT_EQ(s.evicted_workers, std::vector<int32_t>{2});
  EXPECT_TRUE(s.aborted.empty());
  {
    absl::MutexLock l(&f->mu);
    ASSERT_FALSE(f->logs.empty());
    EXPECT_NE(f->logs[0].find("worker 2"), std::string::npos) << f->logs[0];
  }
  // The next step needs only the two remaining workers.
  ASSERT_TRUE(PushConst(*f->store, 0, 2, 1.0f, 1).ok());
  ASSERT_TRUE(PushConst(*f->store, 1, 2, 1.0f, 1).ok());
  EXPECT_EQ(f->store->Stats().steps, 2);
}

bool Logged(ModeFixture& f, const std::string& text) {
  absl::MutexLock l(&f.mu);
  for (const std::string& m : f.logs) {
    if (m.find(text) != std::string::npos) return true;
  }
  return false;
}

// A worker not heard from yet may still be starting: the step waits for it
// up to the join timeout, not the sync timeout, and so does the pull the
// step holds up; the step then averages every worker's gradient. Once
// heard from, a silent worker is evicted after the sync timeout as usual.
TEST(SyncModeTest, AWorkerNotHeardFromYetIsWaitedForUpToTheJoinTimeout) {
  auto f = NewModeStore(TrainMode::kSync, 2, 0, 1, absl::Milliseconds(100), 0,
                        /*join_timeout=*/absl::Seconds(60));
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*f->store, 1, -1);
  absl::SleepFor(absl::Milliseconds(600));  // Six sync timeouts.
  EXPECT_FALSE(waiting->done.HasBeenNotified()) << waiting->status;
  EXPECT_TRUE(f->store->Stats().evicted_workers.empty());
  EXPECT_TRUE(Logged(*f, "waiting for worker 1, not heard from yet"));
  // Its gradient comes in two parts; from the first one on it has the sync
  // timeout, counted from then, for the rest.
  TinyPart b0 = PartOf(0, 3.0f, 0), b1 = PartOf(1, 3.0f, 0);
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 0, 2}, b0.chunks).ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(waiting->done.HasBeenNotified()) << waiting->status;
  EXPECT_TRUE(f->store->Stats().evicted_workers.empty());
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 1, 2}, b1.chunks).ok());
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -2.0f));
  // Step 1 without worker 1, now heard from: evicted after the sync timeout.
  ASSERT_TRUE(PushConst(*f->store, 0, 2, 1.0f, 1).ok());
  auto next = StartPull(*f->store, 2, -1);
  ASSERT_TRUE(next->done.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "a worker heard from before was given the join timeout";
  EXPECT_TRUE(next->status.ok()) << next->status;
  EXPECT_EQ(f->store->Stats().evicted_workers, std::vector<int32_t>{1});
}

TEST(SyncModeTest, AWorkerNeverHeardFromIsEvictedAfterTheJoinTimeout) {
  auto f = NewModeStore(TrainMode::kSync, 2, 0, 1, absl::Milliseconds(100), 0,
                        /*join_timeout=*/absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*f->store, 1, -1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -1.0f));
  EXPECT_EQ(f->store->Stats().evicted_workers, std::vector<int32_t>{1});
  EXPECT_TRUE(Logged(*f, "not heard from within the join timeout of 500ms"));
}

TEST(SyncModeTest, TooFewWorkersAbortsNamingTheMissingOne) {
  auto f = NewModeStore(TrainMode::kSync, 3, 0, /*min_replicas=*/3,
                        absl::Milliseconds(150));
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*f->store, 2, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*f->store, 1, -1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kAborted);
  EXPECT_NE(waiting->status.message().find("worker 1"), std::string::npos)
      << waiting->status;
  EXPECT_EQ(PushConst(*f->store, 0, 2, 1.0f, 0).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, 0.0f));  // nothing applied
}

TEST(SyncModeTest, LeavingWorkerIsNotWaitedFor) {
  auto f = NewModeStore(TrainMode::kSync, 2);
  ASSERT_TRUE(f->store->Leave(1).ok());
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 2.0f, 0).ok());
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -2.0f));
  // A push missing chunks is refused in sync mode.
  std::vector<float> g(6, 1.0f);
  std::vector<ChunkBytes> one = {{0, 1, g.data(), 16}};
  EXPECT_EQ(f->store->Push(0, 2, one).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Log messages are delivered with no lock of the store held, so the log
// callback may call back into the store (it used to run under the lock).
TEST(SyncModeTest, EvictionIsLoggedOutsideTheStoreLocks) {
  ParameterStoreOptions o;
  o.optimizer.name = "sgd";
  o.mode = TrainMode::kSync;
  o.num_workers = 2;
  o.sync_timeout = absl::Milliseconds(100);
  absl::Mutex mu;
  std::vector<size_t> evicted_seen;
  ParameterStore* raw = nullptr;
  o.log = [&](const std::string&) {
    const ShardStats s = raw->Stats();
    absl::MutexLock l(&mu);
    evicted_seen.push_back(s.evicted_workers.size());
  };
  auto store = std::move(*ParameterStore::Create(o));
  raw = store.get();
  std::vector<float> zeros(6, 0.0f);
  std::vector<ChunkBytes> init;
  const ShardMap map = *ComputeShardMap(TinyLayout());
  for (const Chunk& c : map.chunks) {
    init.push_back({c.id, 0, zeros.data() + c.flat_offset, c.num_elements * 4});
  }
  ASSERT_TRUE(store->Declare(TinyLayout(), init).ok());
  // The push first: worker 1's eviction comes a sync timeout after it, and
  // a pull waits a sync timeout from its own start, so a pull started
  // before the push could expire first (it did under TSan).
  ASSERT_TRUE(PushConst(*store, 0, 1, 1.0f, 0).ok());
  auto waiting = StartPull(*store, 1, -1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(waiting->status.ok()) << waiting->status;
  absl::MutexLock l(&mu);
  ASSERT_FALSE(evicted_seen.empty());
  EXPECT_EQ(evicted_seen[0], 1u);  // Logged after worker 1's eviction.
}

// No wait outlives the sync timeout, whatever the pull asks for: on a fresh
// job where nobody has pushed, a pull for step 1 is answered
// DEADLINE_EXCEEDED after about the timeout, naming the step, and nobody is
// evicted for it (a pull alone does not make the workers late).
TEST(SyncModeTest, PullForAStepNobodyPushedForEndsAtTheTimeout) {
  auto f = NewModeStore(TrainMode::kSync, 2, 0, 1, absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  auto waiting = StartPull(*f->store, 1, -1);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(3)))
      << "the pull outlived the sync timeout";
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kDeadlineExceeded)
      << waiting->status;
  EXPECT_NE(waiting->status.message().find("step 1"), std::string::npos)
      << waiting->status;
  ShardStats s = f->store->Stats();
  EXPECT_TRUE(s.evicted_workers.empty());
  EXPECT_TRUE(s.aborted.empty()) << s.aborted;
  EXPECT_EQ(s.rejected["wait_timeout"], 1);
  // The job is untouched: a step still needs both workers.
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  EXPECT_EQ(f->store->Stats().steps, 0);
  ASSERT_TRUE(PushConst(*f->store, 1, 1, 3.0f, 0).ok());
  EXPECT_EQ(f->store->Stats().steps, 1);
}

// A min_version far beyond the next step is refused at once; one a few
// steps ahead waits, but no longer than the timeout: the missing worker is
// evicted as usual, the step completes, and the pull, still short of its
// step, ends with DEADLINE_EXCEEDED.
TEST(SyncModeTest, PullFarAheadIsRefusedAndOneAheadEndsAtTheTimeout) {
  auto f = NewModeStore(TrainMode::kSync, 2, 0, 1, absl::Milliseconds(200));
  auto absurd = StartPull(*f->store, 1000000000, -1);
  ASSERT_TRUE(absurd->done.HasBeenNotified());
  EXPECT_EQ(absurd->status.code(), absl::StatusCode::kInvalidArgument)
      << absurd->status;
  EXPECT_NE(absurd->status.message().find("1000000000"), std::string::npos)
      << absurd->status;
  ASSERT_TRUE(PushConst(*f->store, 0, 1, 1.0f, 0).ok());
  auto ahead = StartPull(*f->store, 3, -1);
  ASSERT_TRUE(ahead->done.WaitForNotificationWithTimeout(absl::Seconds(3)))
      << "the pull outlived the sync timeout";
  EXPECT_EQ(ahead->status.code(), absl::StatusCode::kDeadlineExceeded)
      << ahead->status;
  ShardStats s = f->store->Stats();
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.evicted_workers, std::vector<int32_t>{1});
}

// The refusal of a push missing chunks says what sync mode needs.
TEST(SyncModeTest, PushMissingChunksIsRefusedSayingWhy) {
  auto f = NewModeStore(TrainMode::kSync, 1);
  TinyPart a0 = PartOf(0, 1.0f, 0);
  auto r = f->store->Push(0, 1, a0.chunks);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("every chunk"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("carries 1"), std::string::npos)
      << r.status();
  // Cut into parts, the parts together must carry them all; an empty part
  // is refused before that.
  ASSERT_TRUE(f->store->Push(PushId{0, 2, 0, 2}, a0.chunks).ok());
  r = f->store->Push(PushId{0, 2, 1, 2}, {});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("without gradients"), std::string::npos)
      << r.status();
}

TEST(PushPartsTest, SyncStepWaitsForEveryPartOfEveryWorker) {
  auto f = NewModeStore(TrainMode::kSync, 2);
  TinyPart a0 = PartOf(0, 1.0f, 0), a1 = PartOf(1, 1.0f, 0);
  TinyPart b0 = PartOf(0, 3.0f, 0), b1 = PartOf(1, 3.0f, 0);
  ASSERT_TRUE(f->store->Push(PushId{0, 1, 1, 2}, a1.chunks).ok());
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 0, 2}, b0.chunks).ok());
  ASSERT_TRUE(f->store->Push(PushId{0, 1, 0, 2}, a0.chunks).ok());
  EXPECT_EQ(f->store->Stats().steps, 0);  // Worker 1 has half its gradient in.
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, 0.0f));
  ASSERT_TRUE(f->store->Push(PushId{1, 1, 1, 2}, b1.chunks).ok());
  EXPECT_EQ(f->store->Stats().steps, 1);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -2.0f));  // -mean(1, 3)
}

// The two parts of each push arrive on two threads at once, as the parts
// of a push do over a connection with two calls in flight. The store claims
// them in one order and the policy may take them in the other; whichever
// brings the gradient's last part completes the step, at once, not when the
// sync timeout gives up waiting for a part that is already in.
TEST(PushPartsTest, SyncStepCompletesWhicheverPartComesLast) {
  auto f = NewModeStore(TrainMode::kSync, 1, 0, 1, absl::Seconds(60));
  // The race is narrow (between the store's claim and the policy's lock):
  // many rounds.
  constexpr int64_t kSteps = 40000;
  const int64_t stuck = RacePushParts(
      *f->store, kSteps, [](int64_t seq) { return seq - 1; },
      [](int64_t) {},
      [&](int64_t seq) { return f->store->Stats().steps == seq; });
  EXPECT_EQ(stuck, 0) << "step " << stuck
                      << " waits although both its parts are in";
  if (stuck == 0) {
    EXPECT_EQ(Values(*f->store), std::vector<float>(6, -1.0f * kSteps));
    EXPECT_EQ(f->store->Stats().pushes_applied, kSteps);
  }
}

TEST(PushPartsTest, SyncRefusesAChunkSentInTwoParts) {
  auto f = NewModeStore(TrainMode::kSync, 1);
  TinyPart a0 = PartOf(0, 1.0f, 0);
  ASSERT_TRUE(f->store->Push(PushId{0, 1, 0, 2}, a0.chunks).ok());
  EXPECT_EQ(f->store->Push(PushId{0, 1, 1, 2}, a0.chunks).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->store->Stats().steps, 0);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, 0.0f));
  // The worker's next push, whole, completes the step.
  ASSERT_TRUE(PushConst(*f->store, 0, 2, 1.0f, 0).ok());
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -1.0f));
}
}  // namespace
}  // namespace downpour
