// Recovery in sync mode (issue 14, item 3), in process: a shard restored
// from a snapshot RESUMES at the workers' step (server/sync_policy.cc,
// AdoptStepLocked); no step is redone. Two worker threads drive each run the
// way ps_worker's sync loop does (worker/exchange.cc: push the gradient
// computed from step v with base_version v, then pull min_version v + 1).
// Checked: no pull or push hangs (each pull is answered within sync_timeout
// plus slack, or the test fails instead of hanging), two runs restored from
// the same snapshot file and fed the same pushes end bit-for-bit identical
// in values and versions, and their exact relation to the run that was
// never interrupted (sgd, learning rate 1, integer-valued gradients that
// depend only on (worker, step), so every sum is exact in float32):
//  * workers at the snapshot's step: identical to the undisturbed run;
//  * workers ahead of it (their pushes computed from later steps): the same
//    versions as the undisturbed run, and values that differ from it by
//    exactly the lost steps' updates.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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
absl::StatusOr<std::vector<int64_t>> PullStep(ParameterStore& s, int64_t step) {
  struct State {
    absl::Notification done;
    absl::Status status;
    std::vector<int64_t> versions;
  };
  auto st = std::make_shared<State>();
  PullSpec spec;
  spec.min_version = step;
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

absl::Status PushStep(ParameterStore& s, const Fixture& f, int w, int64_t step) {
  const std::vector<float> g = Grad(f, w, step);
  std::vector<ChunkBytes> grads = ChunksOf(f, 0, g);
  for (ChunkBytes& c : grads) c.base_version = step;
  absl::StatusOr<PushResult> r =
      s.Push(PushId{w, step + 1, 0, 1, kIncarnation[w]}, grads);
  if (!r.ok()) return r.status();
  if (r->dropped || r->duplicate) {
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
    absl::StatusOr<std::vector<int64_t>> v = PullStep(s, step + 1);
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

// The shard dies in the middle of step kSnapStep + 1: worker 0's gradient
// for it was acknowledged by the old shard (so worker 0 only waits for the
// next step), worker 1's was not (so it sends it to the restored shard).
// Whichever arrives first, every call is answered within the bound. NOT
// checked, because it does not hold today: that both orders end alike.
// Pull first: the shard jumps to the next step, worker 1's gradient is
// dropped as stale, no wait. Push first: the shard adopts the half step,
// worker 0's pull waits sync_timeout, worker 0 is evicted and the step is
// applied with worker 1's gradient alone (--min_replicas=2 would abort).
TEST(SyncRestoreTest, StepHalfPushedAtTheCrashNeverHangs) {
  const Fixture f = IntegerModel();
  const int64_t half = kSnapStep + 1;
  Result undisturbed;
  const std::string dir =
      SnapshotThenRunOn(f, "sync_restore_half", half, &undisturbed);
  for (bool pull_first : {true, false}) {
    SCOPED_TRACE(pull_first ? "worker 0's pull first" : "worker 1's push first");
    auto b = Restored(dir);
    absl::StatusOr<std::vector<int64_t>> pulled[kWorkers];
    absl::Status pushed;
    if (pull_first) {
      pulled[0] = PullStep(*b, half + 1);
      pushed = PushStep(*b, f, 1, half);
      pulled[1] = PullStep(*b, half + 1);
    } else {
      pushed = PushStep(*b, f, 1, half);
      std::thread w1([&] { pulled[1] = PullStep(*b, half + 1); });
      pulled[0] = PullStep(*b, half + 1);
      w1.join();
    }
    EXPECT_EQ(pushed.ok(), !pull_first) << pushed;  // dropped when late
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(pulled[w].ok()) << "worker " << w << ": " << pulled[w].status();
      for (int64_t v : *pulled[w]) EXPECT_EQ(v, half + 1);
    }
    b->Shutdown();
  }
}

}  // namespace
}  // namespace downpour
