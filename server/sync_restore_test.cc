// Restore in sync mode, in process: a shard restored from a snapshot RESUMES at
// the workers' step (server/sync_policy.cc, AdoptStepLocked); no step is
// redone. Two worker threads drive each run the way ps_worker's sync loop does
// (worker/exchange.cc: push the gradient computed from step v with base_version
// v, then pull min_version v + 1). Checked: no pull or push hangs (each pull is
// answered within sync_timeout plus slack, or the test fails instead of
// hanging), two runs restored from the same snapshot file and fed the same
// pushes end bit-for-bit identical in values and versions, and their exact
// relation to the run that was never interrupted (sgd, learning rate 1,
// integer-valued gradients that depend only on (worker, step), so every sum is
// exact in float32):
//  * workers at the snapshot's step: identical to the undisturbed run;
//  * workers ahead of it (their pushes computed from later steps): the same
//    versions as the undisturbed run, and values that differ from it by
//    exactly the lost steps' updates;
//  * a step half pushed at the crash (one worker's gradient acknowledged by
//    the dead process): the same outcome whatever reaches the restored
//    shard first, without a wait for the sync timeout or an eviction;
//  * a restarted worker's gradient replaces its dead process's half push.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/shard_snapshot.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using store_test::ChunksOf;
using store_test::Fixture;

constexpr int kWorkers = 2;
constexpr uint64_t kIncarnation[kWorkers] = {11, 22};
constexpr int64_t kSnapStep = 3;  // The snapshot is taken at this step.
constexpr absl::Duration kSyncTimeout = absl::Seconds(3);
// Longest a pull may take before the test calls it a hang: the store
// promises sync_timeout (3 s) plus a timer tick; 10 s of slack.
constexpr absl::Duration kHangBound = absl::Seconds(13);

// A one-shard model in several chunks, with small integer initial values.
Fixture IntegerModel() {
  Fixture f = store_test::MakeFixture(1);
  for (size_t i = 0; i < f.flat.size(); ++i) f.flat[i] = static_cast<float>(i % 7);
  return f;
}

// Worker w's gradient computed from step `step`: integers, so that a step's
// mean (a multiple of 0.5) and every sum of them is exact.
std::vector<float> Grad(const Fixture& f, int w, int64_t step) {
  std::vector<float> g(f.flat.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>((w + 1) * (step + 1) + static_cast<int>(i % 3));
  }
  return g;
}

std::unique_ptr<ParameterStore> SyncStore() {
  ParameterStoreOptions o;
  o.optimizer.name = "sgd";
  o.optimizer.learning_rate = 1.0f;
  o.mode = TrainMode::kSync;
  o.num_workers = kWorkers;
  o.sync_timeout = kSyncTimeout;
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// A pull waiting for `step`; its callbacks own their state, so a pull the
// test gave up on cannot touch freed memory. Returns the versions served
// (one per chunk), or DEADLINE_EXCEEDED "hung" after kHangBound.
absl::StatusOr<std::vector<int64_t>> PullStep(ParameterStore& s, int w,
                                              int64_t step,
                                              bool with_push = false) {
  struct State {
    absl::Notification done;
    absl::Status status;
    std::vector<int64_t> versions;
  };
  auto st = std::make_shared<State>();
  PullSpec spec;
  spec.min_version = step;
  spec.worker_id = w;
  spec.with_push = with_push;
  s.PullWhenReady(spec, [st](const ChunkView& c) { st->versions.push_back(c.version); },
                  [st](absl::Status x) {
                    st->status = std::move(x);
                    st->done.Notify();
                  });
  if (!st->done.WaitForNotificationWithTimeout(kHangBound)) {
    return absl::DeadlineExceededError(
        absl::StrCat("hung: pull for step ", step, " not answered within ",
                     absl::FormatDuration(kHangBound)));
  }
  if (!st->status.ok()) return st->status;
  return st->versions;
}

// Worker w's push of its gradient computed from `step`; with num_parts > 1
// only part `part` of it (the shard's chunks dealt in order into num_parts
// groups). A push the shard dropped (stale) or took as a retry is an error
// unless `may_drop`.
absl::Status PushStep(ParameterStore& s, const Fixture& f, int w, int64_t step,
                      int part = 0, int num_parts = 1, bool may_drop = false) {
  const std::vector<float> g = Grad(f, w, step);
  std::vector<ChunkBytes> all = ChunksOf(f, 0, g);
  for (ChunkBytes& c : all) c.base_version = step;
  std::vector<ChunkBytes> grads;
  for (size_t i = 0; i < all.size(); ++i) {
    if (static_cast<int>(i * num_parts / all.size()) == part) {
      grads.push_back(all[i]);
    }
  }
  absl::StatusOr<PushResult> r =
      s.Push(PushId{w, step + 1, part, num_parts, kIncarnation[w]}, grads);
  if (!r.ok()) return r.status();
  if (!may_drop && (r->dropped || r->duplicate)) {
    return absl::InternalError(absl::StrCat("worker ", w, "'s push for step ",
                                            step, " was not taken"));
  }
  return absl::OkStatus();
}

// Worker w's part of steps [from, to): push from step v, wait for v + 1.
absl::Status RunWorker(ParameterStore& s, const Fixture& f, int w, int64_t from,
                       int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    absl::Status st = PushStep(s, f, w, step);
    if (!st.ok()) return st;
    absl::StatusOr<std::vector<int64_t>> v = PullStep(s, w, step + 1);
    if (!v.ok()) return v.status();
    for (int64_t version : *v) {
      if (version != step + 1) {
        return absl::InternalError(absl::StrCat("worker ", w, " waited for step ",
                                                step + 1, ", got version ", version));
      }
    }
  }
  return absl::OkStatus();
}

// Both workers, each on its own thread, through steps [from, to).
void RunSteps(ParameterStore& s, const Fixture& f, int64_t from, int64_t to) {
  absl::Status status[kWorkers];
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] { status[w] = RunWorker(s, f, w, from, to); });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_TRUE(status[w].ok()) << "worker " << w << ": " << status[w];
  }
}

struct Result {
  std::vector<float> values;
  std::vector<int64_t> versions;
};
Result Read(ParameterStore& s, const Fixture& f) {
  Result r;
  r.values = store_test::Snapshot(s, f, &r.versions);
  return r;
}

// Runs steps [0, kSnapStep), saves a snapshot to a file, runs on through
// [kSnapStep, to) undisturbed and returns the snapshot's path and the end.
std::string SnapshotThenRunOn(const Fixture& f, const std::string& name,
                              int64_t to, Result* undisturbed) {
  auto a = SyncStore();
  EXPECT_TRUE(a->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  RunSteps(*a, f, 0, kSnapStep);
  absl::StatusOr<ShardSnapshot> snap = a->Save();
  EXPECT_TRUE(snap.ok()) << snap.status();
  const std::string dir = TestTmpPath(name);
  std::filesystem::remove_all(dir);
  absl::StatusOr<std::string> path = WriteShardSnapshot(dir, *snap, {});
  EXPECT_TRUE(path.ok()) << path.status();
  RunSteps(*a, f, kSnapStep, to);
  *undisturbed = Read(*a, f);
  EXPECT_EQ(a->Stats().steps, to);
  a->Shutdown();
  return dir;
}

// A fresh store restored from the newest snapshot in `dir`.
std::unique_ptr<ParameterStore> Restored(const std::string& dir) {
  absl::StatusOr<LoadedSnapshot> l = LoadLatestShardSnapshot(dir, 0, 1);
  EXPECT_TRUE(l.ok()) << l.status();
  auto s = SyncStore();
  EXPECT_TRUE(s->Restore(l->snapshot).ok());
  return s;
}

void ExpectCleanRun(ParameterStore& s, int64_t steps) {
  const ShardStats st = s.Stats();
  EXPECT_EQ(st.steps, steps);
  EXPECT_TRUE(st.evicted_workers.empty());
  EXPECT_EQ(st.dropped_stale, 0);
}

// The shard dies and comes back before any worker pushed for the snapshot's
// step: nothing is lost, and every restored run equals the undisturbed one.
TEST(SyncRestoreTest, RestoredAtTheWorkersStepEqualsTheUndisturbedRun) {
  const Fixture f = IntegerModel();
  const int64_t end = kSnapStep + 3;
  Result undisturbed;
  const std::string dir = SnapshotThenRunOn(f, "sync_restore_same", end, &undisturbed);
  Result run[2];
  for (Result& r : run) {
    auto b = Restored(dir);
    RunSteps(*b, f, kSnapStep, end);
    ExpectCleanRun(*b, end);
    r = Read(*b, f);
    b->Shutdown();
  }
  EXPECT_EQ(run[0].values, run[1].values);
  EXPECT_EQ(run[0].versions, run[1].versions);
  EXPECT_EQ(run[0].values, undisturbed.values);
  EXPECT_EQ(run[0].versions, undisturbed.versions);
  for (int64_t v : run[0].versions) EXPECT_EQ(v, end);
}

// The shard dies at step kSnapStep + 2, after its snapshot at kSnapStep; the
// workers, which pulled step kSnapStep + 2 from it, push gradients computed
// from that step to the restored shard. The shard resumes there: same
// versions as the undisturbed run, values short of exactly the two lost
// steps' updates (lr 1: undisturbed + the lost steps' mean gradients).
TEST(SyncRestoreTest, WorkersAheadOfTheSnapshotResumeAtTheirStep) {
  const Fixture f = IntegerModel();
  const int64_t crash = kSnapStep + 2;
  const int64_t end = crash + 3;
  Result undisturbed;
  const std::string dir = SnapshotThenRunOn(f, "sync_restore_ahead", end, &undisturbed);
  Result run[2];
  for (Result& r : run) {
    auto b = Restored(dir);
    RunSteps(*b, f, crash, end);
    ExpectCleanRun(*b, end);
    r = Read(*b, f);
    b->Shutdown();
  }
  EXPECT_EQ(run[0].values, run[1].values);
  EXPECT_EQ(run[0].versions, run[1].versions);
  EXPECT_EQ(run[0].versions, undisturbed.versions);
  std::vector<float> expected = undisturbed.values;
  for (int64_t step = kSnapStep; step < crash; ++step) {
    const std::vector<float> g0 = Grad(f, 0, step), g1 = Grad(f, 1, step);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += (g0[i] + g1[i]) / 2;
  }
  EXPECT_EQ(run[0].values, expected);
  EXPECT_NE(run[0].values, undisturbed.values);
}

// The shard dies in the middle of step T = kSnapStep + 1: worker 0's
// gradient for T was acknowledged by the old process (so worker 0 only waits
// for T + 1), worker 1's was not, or only its first part was (so it sends
// its gradient, or the rest of it, to the restored shard). The defined
// outcome (server/sync_policy.h, "Snapshots and restore"), whichever request
// reaches the restored shard first and however worker 1's gradient arrives:
// step T is lost for both workers, the shard goes on at T + 1 with the
// snapshot's values, nobody is evicted and nothing waits for the sync timeout;
// the runs then go on identically.
TEST(SyncRestoreTest, StepHalfPushedAtTheCrashEndsAlikeInEveryOrder) {
  const Fixture f = IntegerModel();
  const int64_t half = kSnapStep + 1;
  const int64_t end = half + 3;
  Result undisturbed;
  const std::string dir =
      SnapshotThenRunOn(f, "sync_restore_half", half, &undisturbed);
  Result snapshot;
  {
    auto b = Restored(dir);
    snapshot = Read(*b, f);
    b->Shutdown();
  }
  // How worker 1's gradient for T reaches the restored shard: whole; only
  // its second part (the first went to the old process); the second part,
  // then the first again (worker/grpc_ps_client.cc re-sends the parts that
  // an older incarnation of the shard acknowledged).
  enum class Arrival { kWhole, kSecondPartOnly, kSecondPartThenFirst };
  std::vector<Result> at_end;
  for (Arrival arrival : {Arrival::kWhole, Arrival::kSecondPartOnly,
                          Arrival::kSecondPartThenFirst}) {
    for (bool pull_first : {true, false}) {
      SCOPED_TRACE(absl::StrCat(
          "worker 1's gradient ",
          arrival == Arrival::kWhole            ? "whole"
          : arrival == Arrival::kSecondPartOnly ? "second part only"
                                                : "second part, then first",
          pull_first ? "; worker 0's pull first" : "; worker 1's push first"));
      auto b = Restored(dir);
      auto push1 = [&]() -> absl::Status {
        switch (arrival) {
          case Arrival::kWhole:
            return PushStep(*b, f, 1, half, 0, 1, /*may_drop=*/true);
          case Arrival::kSecondPartOnly:
            return PushStep(*b, f, 1, half, 1, 2, /*may_drop=*/true);
          case Arrival::kSecondPartThenFirst: {
            absl::Status s = PushStep(*b, f, 1, half, 1, 2, /*may_drop=*/true);
            if (!s.ok()) return s;
            return PushStep(*b, f, 1, half, 0, 2, /*may_drop=*/true);
          }
        }
        return absl::InternalError("unreachable");
      };
      const absl::Time start = absl::Now();
      absl::StatusOr<std::vector<int64_t>> pulled[kWorkers];
      absl::Status pushed;
      if (pull_first) {
        pulled[0] = PullStep(*b, 0, half + 1);
        pushed = push1();
        pulled[1] = PullStep(*b, 1, half + 1);
      } else {
        pushed = push1();
        std::thread w1([&] { pulled[1] = PullStep(*b, 1, half + 1); });
        // Worker 1's pull is (almost always) waiting by the time worker 0's
        // comes; either way the outcome must be the same.
        absl::SleepFor(absl::Milliseconds(50));
        pulled[0] = PullStep(*b, 0, half + 1);
        w1.join();
      }
      const absl::Duration took = absl::Now() - start;
      EXPECT_TRUE(pushed.ok()) << pushed;
      for (int w = 0; w < kWorkers; ++w) {
        ASSERT_TRUE(pulled[w].ok())
            << "worker " << w << ": " << pulled[w].status();
        for (int64_t v : *pulled[w]) EXPECT_EQ(v, half + 1);
      }
      // No wait for the sync timeout (3 s): nobody waits for a gradient
      // that died with the old process.
      EXPECT_LT(took, kSyncTimeout / 2);
      ShardStats st = b->Stats();
      EXPECT_EQ(st.steps, half + 1);
      EXPECT_TRUE(st.evicted_workers.empty());
      EXPECT_TRUE(st.aborted.empty()) << st.aborted;
      const Result moved = Read(*b, f);
      EXPECT_EQ(moved.values, snapshot.values);  // Steps kSnapStep..T lost.
      for (int64_t v : moved.versions) EXPECT_EQ(v, half + 1);
      // And the job goes on from there, in step.
      RunSteps(*b, f, half + 1, end);
      st = b->Stats();
      EXPECT_EQ(st.steps, end);
      EXPECT_TRUE(st.evicted_workers.empty());
      at_end.push_back(Read(*b, f));
      b->Shutdown();
    }
  }
  for (size_t i = 1; i < at_end.size(); ++i) {
    EXPECT_EQ(at_end[i].values, at_end[0].values) << "run " << i;
    EXPECT_EQ(at_end[i].versions, at_end[0].versions) << "run " << i;
  }
}

// As above, worker 1's first part acknowledged by the dead process, but its
// pull comes with its second part (a PushPull with pull_min_version): the
// restored shard answers it at once, below the step asked for, and does
// not move on; worker 1 sends its first part again, and step T completes
// with both gradients, as it does when the second part's push is
// acknowledged before the resend and the pull.
TEST(SyncRestoreTest, PullWithTheLastPartLetsTheWorkerResendFirst) {
  const Fixture f = IntegerModel();
  const int64_t half = kSnapStep + 1;
  Result undisturbed;
  const std::string dir =
      SnapshotThenRunOn(f, "sync_restore_with_push", half, &undisturbed);
  auto b = Restored(dir);
  const Result snapshot = Read(*b, f);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(PushStep(*b, f, 1, half, 1, 2).ok());
  absl::StatusOr<std::vector<int64_t>> early =
      PullStep(*b, 1, half + 1, /*with_push=*/true);
  ASSERT_TRUE(early.ok()) << early.status();
  for (int64_t v : *early) EXPECT_EQ(v, half);  // Below the step asked for.
  EXPECT_LT(absl::Now() - start, kSyncTimeout / 2);
  EXPECT_EQ(b->Stats().steps, half);  // Not moved on.
  ASSERT_TRUE(PushStep(*b, f, 1, half, 0, 2).ok());
  ASSERT_TRUE(PushStep(*b, f, 0, half).ok());
  for (int w = 0; w < kWorkers; ++w) {
    absl::StatusOr<std::vector<int64_t>> v = PullStep(*b, w, half + 1);
    ASSERT_TRUE(v.ok()) << v.status();
    for (int64_t version : *v) EXPECT_EQ(version, half + 1);
  }
  const ShardStats st = b->Stats();
  EXPECT_EQ(st.steps, half + 1);
  EXPECT_TRUE(st.evicted_workers.empty());
  EXPECT_EQ(st.dropped_stale, 0);
  const std::vector<float> g0 = Grad(f, 0, half), g1 = Grad(f, 1, half);
  const Result end = Read(*b, f);
  for (size_t i = 0; i < end.values.size(); ++i) {
    ASSERT_EQ(end.values[i], snapshot.values[i] - (g0[i] + g1[i]) / 2) << i;
  }
  b->Shutdown();
}

// A worker process dies in the middle of its push for a step (one part of
// two in) and a new process of the same index (a new incarnation, seq from
// 1) pushes its whole gradient for that step: it replaces the dead
// process's part, so the step completes at once instead of after the sync
// timeout with the worker evicted.
TEST(SyncRestoreTest, RestartedWorkersGradientReplacesTheDeadProcesssPart) {
  const Fixture f = IntegerModel();
  auto s = SyncStore();
  ASSERT_TRUE(s->Declare(f.layout, ChunksOf(f, 0, f.flat)).ok());
  RunSteps(*s, f, 0, 2);
  // The old process of worker 1 (seq 3 for step 2) gets part 0 of 2 in.
  ASSERT_TRUE(PushStep(*s, f, 1, 2, /*part=*/0, /*num_parts=*/2).ok());
  const absl::Time start = absl::Now();
  // Its new process: seq 1, another incarnation, the whole gradient.
  std::vector<float> g = Grad(f, 1, 2);
  std::vector<ChunkBytes> grads = ChunksOf(f, 0, g);
  for (ChunkBytes& c : grads) c.base_version = 2;
  absl::StatusOr<PushResult> r = s->Push(PushId{1, 1, 0, 1, 99}, grads);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->dropped);
  ASSERT_TRUE(PushStep(*s, f, 0, 2).ok());
  for (int w = 0; w < kWorkers; ++w) {
    absl::StatusOr<std::vector<int64_t>> v = PullStep(*s, w, 3);
    ASSERT_TRUE(v.ok()) << v.status();
  }
  EXPECT_LT(absl::Now() - start, kSyncTimeout / 2);
  const ShardStats st = s->Stats();
  EXPECT_EQ(st.steps, 3);
  EXPECT_TRUE(st.evicted_workers.empty());
  s->Shutdown();
}

}  // namespace
}  // namespace downpour
