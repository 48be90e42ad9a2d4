// File: server/lr_rules_test.cc
//
// The default learning-rate rules: the job's horizon in updates per chunk,
// the rules' values, and the command line winning over them.
#include "server/lr_rules.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

JobShape Job(TrainMode mode, int workers, int64_t examples = 60000) {
  JobShape j;
  j.mode = mode;
  j.workers = workers;
  j.epochs = 10;
  j.batch_size = 64;
  j.train_examples = examples;
  return j;
}

TEST(LrRulesTest, SyncCountsOneUpdatePerStep) {
  // 60000 / 2 = 30000 examples per worker, 469 batches of 64 per epoch.
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSync, 2)), 4690);
  // 15000 per worker: 235 batches (the last one partial).
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSync, 4)), 2350);
}

TEST(LrRulesTest, AsyncAndSspCountEveryWorkersPushes) {
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kAsync, 2)), 9380);
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSsp, 4)), 9400);
  JobShape o = Job(TrainMode::kAsync, 2);
  o.n_push = 4;  // One push every 4 steps: 469 * 10 / 4 rounded up, x 2.
  EXPECT_EQ(JobUpdatesPerChunk(o), 2 * 1173);
}

TEST(LrRulesTest, ReplicasOfOneProcessShareItsData) {
  JobShape o = Job(TrainMode::kSync, 1, 6400);
  o.replicas_per_worker = 2;  // Each step reads 2 x 64 examples.
  EXPECT_EQ(JobUpdatesPerChunk(o), 10 * 50);
  o.mode = TrainMode::kAsync;
  o.local_sum = false;  // Each replica pushes on its own.
  EXPECT_EQ(JobUpdatesPerChunk(o), 2 * 10 * 50);
}

TEST(LrRulesTest, AutoGivesScalingWarmupAndCosineToZero) {
  const LrRules sync = AutoLrRules(Job(TrainMode::kSync, 2), "adam");
  EXPECT_EQ(sync.worker_scaling, "linear");
  EXPECT_EQ(sync.warmup_updates, 234);
  EXPECT_EQ(sync.decay, "cosine");
  EXPECT_EQ(sync.decay_updates, 4690);
  EXPECT_EQ(sync.min_factor, 0);
  EXPECT_FALSE(sync.adam_beta1.has_value());
  const LrRules async = AutoLrRules(Job(TrainMode::kAsync, 8), "adam");
  EXPECT_EQ(async.worker_scaling, kAsyncScaling);
  EXPECT_EQ(async.decay_updates, 9440);  // 8 x 10 x 118.
  ASSERT_TRUE(async.adam_beta1.has_value());
  EXPECT_NEAR(*async.adam_beta1, 0.025, 1e-12);  // 0.9 - (1 - 1/8).
  // A one-step job still warms up over one update.
  EXPECT_EQ(AutoLrRules(Job(TrainMode::kSync, 1, 1), "adam").warmup_updates, 1);
  // A job of one update has none: the cosine decay needs more updates than
  // the warm-up.
  JobShape one = Job(TrainMode::kAsync, 1, 64);
  one.epochs = 1;
  const LrRules single = AutoLrRules(one, "adam");
  EXPECT_EQ(single.decay_updates, 1);
  EXPECT_EQ(single.warmup_updates, 0);
}

TEST(LrRulesTest, AsyncLowersMomentumForTheAsynchrony) {
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 1), 0.9);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 2), 0.4);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 4), 0.15);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 16), 0.0);  // Never negative.
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 0), 0.9);   // Treated as one worker.
  const JobShape o = Job(TrainMode::kSsp, 4);
  EXPECT_DOUBLE_EQ(AutoLrRules(o, "adam").adam_beta1.value(), 0.15);
  EXPECT_DOUBLE_EQ(AutoLrRules(o, "momentum").momentum.value(), 0.15);
  EXPECT_FALSE(AutoLrRules(o, "momentum").adam_beta1.has_value());
  // No momentum to lower.
  EXPECT_FALSE(AutoLrRules(o, "adagrad").adam_beta1.has_value());
  EXPECT_FALSE(AutoLrRules(o, "adagrad").momentum.has_value());
  // Sync's updates are not stale.
  EXPECT_FALSE(AutoLrRules(Job(TrainMode::kSync, 4), "adam").adam_beta1);
}

TEST(LrRulesTest, DefaultRatePerOptimizer) {
  EXPECT_DOUBLE_EQ(DefaultLearningRate("adam"), 0.001);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("adagrad"), 0.05);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("momentum"), 0.02);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("sgd"), 0.05);
}

TEST(LrRulesTest, ApplyWritesTheScheduleAndMomentum) {
  OptimizerOptions o;
  o.name = "adam";
  const std::string scaling =
      ApplyLrRules(AutoLrRules(Job(TrainMode::kAsync, 2), "adam"), {}, &o);
  EXPECT_EQ(scaling, kAsyncScaling);
  EXPECT_EQ(o.schedule.decay, "cosine");
  EXPECT_EQ(o.schedule.decay_updates, 9380);
  EXPECT_EQ(o.schedule.warmup_updates, 469);
  EXPECT_EQ(o.schedule.min_factor, 0.0f);
  EXPECT_FLOAT_EQ(o.adam_beta1, 0.4f);
}

TEST(LrRulesTest, FlagsGivenOnTheCommandLineWin) {
  OptimizerOptions o;
  o.schedule.decay = "none";
  o.adam_beta1 = 0.8f;
  const std::set<std::string> given = {"lr_decay", "adam_beta1"};
  ApplyLrRules(AutoLrRules(Job(TrainMode::kAsync, 2), "adam"), given, &o);
  EXPECT_EQ(o.schedule.decay, "none");
  EXPECT_FLOAT_EQ(o.adam_beta1, 0.8f);
  EXPECT_EQ(o.schedule.decay_updates, 9380);  // Not given: the rule's.
}

}  // namespace
}  // namespace downpour
