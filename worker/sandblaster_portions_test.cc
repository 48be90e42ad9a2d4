#include "worker/sandblaster_portions.h"

#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

std::vector<Portion> Portions(int n, int size) {
  std::vector<Portion> p;
  for (int i = 0; i < n; ++i) p.push_back({int64_t{i} * size, size});
  return p;
}

WorkReport Ask(int worker) {
  WorkReport r;
  r.worker = worker;
  return r;
}

WorkReport Result(int worker, const WorkOrder& o, double loss) {
  WorkReport r;
  r.worker = worker;
  r.eval = o.eval;
  r.portion = o.portion;
  r.loss_sum = loss;
  r.examples = o.num_examples;
  return r;
}

WorkReport Pushed(int worker, int64_t eval) {
  WorkReport r;
  r.worker = worker;
  r.pushed_eval = eval;
  return r;
}

// The table's answer, which the test expects to be OK.
WorkOrder Work(PortionTable& table, const WorkReport& r) {
  absl::StatusOr<WorkOrder> o = table.GetWork(r);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : WorkOrder();
}

// Runs Evaluate on its own thread, as the coordinator's driver does, and
// returns once the evaluation is open (a poll says so).
class Evaluation {
 public:
  Evaluation(PortionTable* table, int64_t eval, std::vector<Portion> p)
      : thread_([=] { result_ = table->Evaluate(eval, p); }) {
    WorkReport poll;
    poll.eval = eval;
    poll.poll = true;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!Work(*table, poll).eval_open && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  absl::StatusOr<EvalOutcome> Join() {
    thread_.join();
    return result_;
  }

 private:
  absl::StatusOr<EvalOutcome> result_ = absl::UnknownError("not run");
  std::thread thread_;
};

TEST(PortionTableTest, FirstComeThenBackupsFirstResultWins) {
  PortionTable table(PortionTableOptions{2});
  Evaluation e(&table, 1, Portions(3, 10));
  // Portions go out in order, first come first served.
  const WorkOrder a0 = Work(table, Ask(0));
  const WorkOrder b0 = Work(table, Ask(1));
  ASSERT_EQ(a0.action, WorkAction::kCompute);
  EXPECT_EQ(a0.portion, 0);
  EXPECT_EQ(b0.portion, 1);
  const WorkOrder a1 = Work(table, Result(0, a0, 1.0));
  EXPECT_TRUE(a1.accepted);
  EXPECT_EQ(a1.portion, 2);
  // Worker 0 is done with 2; worker 1 (slow) still holds 1: a backup of 1.
  const WorkOrder a2 = Work(table, Result(0, a1, 3.0));
  EXPECT_TRUE(a2.accepted);
  ASSERT_EQ(a2.action, WorkAction::kCompute);
  EXPECT_EQ(a2.portion, 1);
  // The backup wins; the slow worker's result is not used.
  const WorkOrder a3 = Work(table, Result(0, a2, 2.0));
  EXPECT_TRUE(a3.accepted);
  EXPECT_EQ(a3.action, WorkAction::kPush);
  WorkReport poll;
  poll.worker = 1;
  poll.eval = 1;
  poll.poll = true;
  EXPECT_FALSE(Work(table, poll).eval_open);
  const WorkOrder b1 = Work(table, Result(1, b0, 99.0));
  EXPECT_FALSE(b1.accepted);
  EXPECT_EQ(b1.action, WorkAction::kWait);  // Nothing of its to push.
  EXPECT_EQ(Work(table, Pushed(0, 1)).action, WorkAction::kWait);
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->loss_sum, 6.0);
  EXPECT_EQ(out->examples, 30);
  EXPECT_EQ(out->workers, std::vector<int32_t>{0});
  EXPECT_EQ(out->backups_issued, 1);
  table.Finish("over");
  EXPECT_EQ(Work(table, Ask(1)).action, WorkAction::kDone);
  EXPECT_EQ(table.Evaluate(2, Portions(1, 1)).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(PortionTableTest, AWorkerThatNeverPushesIsGivenUpOn) {
  PortionTableOptions o{2};
  o.push_timeout = absl::Milliseconds(200);
  PortionTable table(o);
  Evaluation e(&table, 5, Portions(2, 4));
  const WorkOrder a0 = Work(table, Ask(0));
  const WorkOrder b0 = Work(table, Ask(1));
  // Worker 1 reports its result, then dies before pushing.
  EXPECT_EQ(Work(table, Result(1, b0, 1.0)).action, WorkAction::kCompute);
  const WorkOrder a1 = Work(table, Result(0, a0, 1.0));
  EXPECT_EQ(a1.action, WorkAction::kPush);
  EXPECT_EQ(Work(table, Pushed(0, 5)).action, WorkAction::kWait);
  // After the timeout its portion is handed out again.
  WorkOrder again;
  for (int i = 0; i < 200 && again.action != WorkAction::kCompute; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    again = Work(table, Ask(0));
  }
  ASSERT_EQ(again.action, WorkAction::kCompute);
  EXPECT_EQ(again.portion, b0.portion);
  EXPECT_EQ(Work(table, Result(0, again, 2.0)).action, WorkAction::kPush);
  EXPECT_EQ(Work(table, Pushed(0, 5)).action, WorkAction::kWait);
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->workers, std::vector<int32_t>{0});
  EXPECT_DOUBLE_EQ(out->loss_sum, 3.0);
  EXPECT_EQ(out->workers_given_up, 1);
  // The given-up worker, back, is told to drop what it holds.
  EXPECT_TRUE(Work(table, Ask(1)).discard);
}

TEST(PortionTableTest, PortionAccountingWithASlowWorker) {
  // Two fast workers and one that takes four turns per portion: every
  // portion is used exactly once and the slow one's share is small.
  PortionTable table(PortionTableOptions{3});
  Evaluation e(&table, 1, Portions(24, 1));
  std::vector<WorkOrder> held(3);
  std::vector<int> used(3, 0), lost(3, 0), turns(3, 0);
  std::vector<WorkReport> next = {Ask(0), Ask(1), Ask(2)};
  bool pushing_done = false;
  for (int tick = 0; tick < 400 && !pushing_done; ++tick) {
    for (int w = 0; w < 3; ++w) {
      if (w == 2 && tick % 4 != 3) continue;  // The slow worker.
      const bool reported = next[w].portion >= 0;
      const WorkOrder o = Work(table, next[w]);
      if (reported) (o.accepted ? used[w] : lost[w])++;
      next[w] = Ask(w);
      if (o.action == WorkAction::kCompute) {
        next[w] = Result(w, o, 1.0);
      } else if (o.action == WorkAction::kPush) {
        next[w] = Pushed(w, o.eval);
      }
    }
    pushing_done = tick > 100;
  }
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(used[0] + used[1] + used[2], 24);
  EXPECT_DOUBLE_EQ(out->loss_sum, 24.0);
  EXPECT_LE(used[2], used[0] / 2);
  EXPECT_GE(used[0], 8);
  EXPECT_GE(used[1], 8);
}

}  // namespace
}  // namespace downpour

namespace downpour {
namespace {

TEST(PortionTableTest, ARestartedWorkersUnpushedResultsAreComputedAgain) {
  PortionTable table(PortionTableOptions{2});
  Evaluation e(&table, 3, Portions(3, 5));
  WorkReport first = Ask(0), second = Ask(1);
  first.incarnation = 11;
  second.incarnation = 21;
  const WorkOrder a0 = Work(table, first);
  const WorkOrder b0 = Work(table, second);
  WorkReport r = Result(1, b0, 1.0);
  r.incarnation = 21;
  EXPECT_TRUE(Work(table, r).accepted);  // Worker 1 holds a used result...
  // ... and its process dies; a new one asks: the result is handed out
  // again, and the new process sits this evaluation out.
  WorkReport reborn = Ask(1);
  reborn.incarnation = 22;
  EXPECT_EQ(Work(table, reborn).action, WorkAction::kWait);
  WorkReport r0 = Result(0, a0, 1.0);
  r0.incarnation = 11;
  WorkOrder next = Work(table, r0);
  std::set<int32_t> done = {a0.portion};
  while (next.action == WorkAction::kCompute) {
    done.insert(next.portion);
    r0 = Result(0, next, 1.0);
    r0.incarnation = 11;
    next = Work(table, r0);
  }
  EXPECT_EQ(done.size(), 3u);  // Worker 0 computed all three, b0's again.
  ASSERT_EQ(next.action, WorkAction::kPush);
  WorkReport pushed = Pushed(0, 3);
  pushed.incarnation = 11;
  Work(table, pushed);
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->workers, std::vector<int32_t>{0});
  EXPECT_DOUBLE_EQ(out->loss_sum, 3.0);
}

}  // namespace
}  // namespace downpour

namespace downpour {
namespace {

// A report whose reply was lost is sent again: the result stays used (the
// worker keeps its gradient), it is counted once, and the portion handed
// out with the lost reply is handed out again.
TEST(PortionTableTest, ARetriedReportOfAnAcceptedPortionIsAcceptedAgain) {
  PortionTable table(PortionTableOptions{2});
  Evaluation e(&table, 1, Portions(3, 10));
  const WorkOrder a0 = Work(table, Ask(0));
  const WorkReport report = Result(0, a0, 1.0);
  const WorkOrder lost = Work(table, report);  // Never reaches the worker.
  ASSERT_TRUE(lost.accepted);
  ASSERT_EQ(lost.action, WorkAction::kCompute);
  const WorkOrder retried = Work(table, report);
  EXPECT_TRUE(retried.accepted);
  EXPECT_EQ(retried.action, WorkAction::kCompute);
  EXPECT_EQ(retried.portion, lost.portion);
  // Another worker's report of the same portion is a losing copy.
  WorkReport copy = Result(1, a0, 5.0);
  EXPECT_FALSE(Work(table, copy).accepted);
  WorkOrder next = Work(table, Result(0, retried, 2.0));
  while (next.action == WorkAction::kCompute) {
    next = Work(table, Result(0, next, 3.0));
  }
  ASSERT_EQ(next.action, WorkAction::kPush);
  Work(table, Pushed(0, 1));
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->workers, std::vector<int32_t>{0});
  EXPECT_DOUBLE_EQ(out->loss_sum, 6.0);
  EXPECT_EQ(out->examples, 30);
}

// The coordinator counts what it can itself: a portion's examples are its
// own whatever the report says; a worker outside the job or a loss that
// is not finite is refused and changes nothing.
TEST(PortionTableTest, BadReportsAreRefusedAndExamplesAreThePortions) {
  PortionTable table(PortionTableOptions{2});
  Evaluation e(&table, 1, Portions(1, 10));
  const WorkOrder a0 = Work(table, Ask(0));
  ASSERT_EQ(a0.action, WorkAction::kCompute);
  EXPECT_EQ(table.GetWork(Ask(2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.GetWork(Ask(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const double loss : {double{NAN}, double{INFINITY}}) {
    EXPECT_EQ(table.GetWork(Result(0, a0, loss)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  WorkReport r = Result(0, a0, 4.0);
  r.examples = -1000000;
  const WorkOrder o = Work(table, r);
  EXPECT_TRUE(o.accepted);
  EXPECT_EQ(o.action, WorkAction::kPush);
  Work(table, Pushed(0, 1));
  absl::StatusOr<EvalOutcome> out = e.Join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->examples, 10);
  EXPECT_DOUBLE_EQ(out->loss_sum, 4.0);
}

// The chief waits for the whole job before its first evaluation: a worker
// counts once it asked for work (a poll or a refused request does not), and
// the wait ends when the last one asks, on Finish, or at its limit.
TEST(PortionTableTest, WaitForWorkersEndsWhenTheLastOneAsks) {
  PortionTable table(PortionTableOptions{3});
  EXPECT_EQ(table.WaitForWorkers(absl::ZeroDuration()), 0);
  EXPECT_EQ(Work(table, Ask(0)).action, WorkAction::kWait);
  WorkReport poll = Ask(1);
  poll.poll = true;
  Work(table, poll);
  EXPECT_FALSE(table.GetWork(Ask(3)).ok());
  EXPECT_EQ(table.WaitForWorkers(absl::Milliseconds(20)), 1);

  int32_t joined = -1;
  absl::Time returned;
  std::thread chief([&] {
    joined = table.WaitForWorkers(absl::Seconds(60));
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(50));
  Work(table, Ask(1));
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time last_asked = absl::Now();
  Work(table, Ask(2));
  chief.join();
  EXPECT_EQ(joined, 3);
  EXPECT_GE(returned, last_asked);  // Not before the last worker asked.
  EXPECT_LT(returned - last_asked, absl::Seconds(30));

  PortionTable alone(PortionTableOptions{2});
  std::thread waiter([&] { joined = alone.WaitForWorkers(absl::Seconds(60)); });
  absl::SleepFor(absl::Milliseconds(20));
  alone.Finish("stopped");
  waiter.join();
  EXPECT_EQ(joined, 0);
}

}  // namespace
}  // namespace downpour
