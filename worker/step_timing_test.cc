#include "worker/step_timing.h"

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(PhaseTimesTest, SharesAndVerdict) {
  PhaseTimes t;
  t.data = 1;
  t.compute = 8;
  t.pull = 0.5;
  t.push = 0.5;
  EXPECT_DOUBLE_EQ(t.Total(), 10);
  EXPECT_EQ(t.Shares(), "[data 10% compute 80% pull 5% push 5%]");
  EXPECT_EQ(t.Verdict(), "compute-bound");
  t.data = 5;
  EXPECT_EQ(t.Verdict(), "input-bound");
  t.data = 0;
  t.pull = 6;
  t.push = 3;
  EXPECT_EQ(t.Verdict(), "communication-bound");
  EXPECT_EQ(PhaseTimes().Shares(), "[data 0% compute 0% pull 0% push 0%]");
}

TEST(PhaseTimesTest, Accumulates) {
  PhaseTimes a, b;
  a.data = 1;
  b.data = 2;
  b.push = 3;
  a += b;
  EXPECT_DOUBLE_EQ(a.data, 3);
  EXPECT_DOUBLE_EQ(a.push, 3);
}

TEST(StopwatchTest, LapsAreNonNegativeAndRestart) {
  Stopwatch w;
  absl::SleepFor(absl::Milliseconds(5));
  const double first = w.Lap();
  EXPECT_GE(first, 0.004);
  EXPECT_LT(w.Lap(), first + 1);
}

TEST(ProgressWindowTest, CloseReportsTheWindowAndStartsAnEmptyOne) {
  ProgressWindow w(absl::Now() - absl::Seconds(2));
  w.times().compute = 1.5;
  w.AddStep(2.0f, 10);
  w.AddStep(4.0f, 30);
  EXPECT_EQ(w.steps(), 2);
  EXPECT_FLOAT_EQ(w.MeanLoss(), 3.0f);
  const Progress p = w.Close(/*step=*/7, /*epoch=*/1);
  EXPECT_EQ(p.step, 7);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_FLOAT_EQ(p.loss, 3.0f);
  EXPECT_DOUBLE_EQ(p.window.compute, 1.5);
  EXPECT_NEAR(p.examples_per_sec, 20, 2);  // 40 examples in about 2 s.
  EXPECT_NEAR(p.sec_per_batch, 1, 0.1);
  EXPECT_EQ(w.steps(), 0);
  EXPECT_DOUBLE_EQ(w.times().Total(), 0);
}

}  // namespace
}  // namespace downpour
