// File: deploy/lr_rules_test.cc
//
// The launcher's default learning-rate rules: the job's horizon in updates
// per chunk, the server flags, their place on a server's command line, and
// counting the training examples of real and generated IDX files.
#include "deploy/lr_rules.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "deploy/cluster_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LaunchOptions Job(TrainMode mode, int workers) {
  LaunchOptions o;
  o.mode = mode;
  o.workers = workers;
  o.epochs = 10;
  o.batch_size = 64;
  return o;
}

TEST(LrRulesTest, SyncCountsOneUpdatePerStep) {
  // 60000 / 2 = 30000 examples per worker, 469 batches of 64 per epoch.
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSync, 2), 60000), 4690);
  // 15000 per worker: 235 batches (the last one partial).
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSync, 4), 60000), 2350);
}

TEST(LrRulesTest, AsyncAndSspCountEveryWorkersPushes) {
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kAsync, 2), 60000), 9380);
  EXPECT_EQ(JobUpdatesPerChunk(Job(TrainMode::kSsp, 4), 60000), 9400);
  LaunchOptions o = Job(TrainMode::kAsync, 2);
  o.n_push = 4;  // One push every 4 steps: 469 * 10 / 4 rounded up, x 2.
  EXPECT_EQ(JobUpdatesPerChunk(o, 60000), 2 * 1173);
}

TEST(LrRulesTest, ReplicasOfOneProcessShareItsData) {
  LaunchOptions o = Job(TrainMode::kSync, 1);
  o.replicas = 2;  // Each step reads 2 x 64 examples.
  EXPECT_EQ(JobUpdatesPerChunk(o, 6400), 10 * 50);
  o.mode = TrainMode::kAsync;
  o.local_aggregation = "none";  // Each replica pushes on its own.
  EXPECT_EQ(JobUpdatesPerChunk(o, 6400), 2 * 10 * 50);
}

TEST(LrRulesTest, AutoGivesScalingWarmupAndCosineToZero) {
  EXPECT_THAT(LrRuleArgs(Job(TrainMode::kSync, 2), 60000),
              ElementsAre("--lr_worker_scaling=linear",
                          "--lr_warmup_updates=234", "--lr_decay=cosine",
                          "--lr_decay_updates=4690", "--lr_min_factor=0"));
  const std::vector<std::string> async =
      LrRuleArgs(Job(TrainMode::kAsync, 8), 60000);
  ASSERT_EQ(async.size(), 6u);
  EXPECT_EQ(async[0], std::string("--lr_worker_scaling=") + kAsyncScaling);
  EXPECT_EQ(async[3], "--lr_decay_updates=9440");  // 8 x 10 x 118.
  EXPECT_EQ(async[5], "--adam_beta1=0.025");       // 0.9 - (1 - 1/8).
  // A one-step job still warms up over one update.
  EXPECT_EQ(LrRuleArgs(Job(TrainMode::kSync, 1), 1)[1],
            "--lr_warmup_updates=1");
}

TEST(LrRulesTest, AsyncLowersMomentumForTheAsynchrony) {
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 1), 0.9);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 2), 0.4);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 4), 0.15);
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 16), 0.0);  // Never negative.
  EXPECT_DOUBLE_EQ(AsyncMomentum(0.9, 0), 0.9);   // Treated as one worker.
  LaunchOptions o = Job(TrainMode::kSsp, 4);
  EXPECT_EQ(LrRuleArgs(o, 60000).back(), "--adam_beta1=0.15");
  o.optimizer = "momentum";
  EXPECT_EQ(LrRuleArgs(o, 60000).back(), "--momentum=0.15");
  o.optimizer = "adagrad";  // No momentum to lower.
  EXPECT_EQ(LrRuleArgs(o, 60000).size(), 5u);
  o.mode = TrainMode::kSync;  // Sync's updates are not stale.
  o.optimizer = "adam";
  EXPECT_EQ(LrRuleArgs(o, 60000).size(), 5u);
}

TEST(LrRulesTest, DefaultRatePerOptimizer) {
  EXPECT_DOUBLE_EQ(DefaultLearningRate("adam"), 0.001);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("adagrad"), 0.05);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("momentum"), 0.02);
  EXPECT_DOUBLE_EQ(DefaultLearningRate("sgd"), 0.05);
}

TEST(LrRulesTest, NoneGivesNothing) {
  LaunchOptions o = Job(TrainMode::kSync, 2);
  o.lr_schedule = "none";
  EXPECT_TRUE(LrRuleArgs(o, 60000).empty());
}

TEST(LrRulesTest, ServerArgsComeAfterTheRulesAndWin) {
  LaunchOptions o = Job(TrainMode::kSync, 2);
  o.ps_server_bin = "/bin/ps_server";
  o.ps_worker_bin = "/bin/ps_worker";
  o.lr_rule_args = LrRuleArgs(o, 60000);
  o.server_args = {"--lr_decay=none"};
  const ClusterPlan plan(o, "/logs");
  const std::string argv = absl::StrJoin(plan.Servers()[0].argv, " ");
  EXPECT_THAT(argv, HasSubstr("--lr_decay=cosine --lr_decay_updates=4690 "
                              "--lr_min_factor=0 --lr_decay=none"));
}

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t != nullptr ? t : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);  // EEXIST is fine.
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

TEST(LrRulesTest, CountsTheRealFashionMnistTrainingSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::ifstream(dir + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  absl::StatusOr<int64_t> n = CountTrainingExamples(dir, 0);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 60000);
  n = CountTrainingExamples(dir, 6000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 6000);
}

TEST(LrRulesTest, ReadsARawHeaderAndRefusesBadFiles) {
  const std::string dir = TempDir("idx");
  // Magic 0x00000801 (unsigned byte, rank 1), count 0x00012345, 3 labels.
  WriteFile(dir + "/train-labels-idx1-ubyte",
            std::string("\x00\x00\x08\x01\x00\x01\x23\x45\x01\x02\x03", 11));
  absl::StatusOr<int64_t> n = CountTrainingExamples(dir, 0);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0x12345);

  WriteFile(dir + "/train-labels-idx1-ubyte", "not idx");
  n = CountTrainingExamples(dir, 0);
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("bad header"));

  n = CountTrainingExamples(TempDir("empty"), 0);
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()),
              HasSubstr("train-labels-idx1-ubyte"));
}

}  // namespace
}  // namespace downpour
