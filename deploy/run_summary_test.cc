// File: deploy/run_summary_test.cc
//
// Statistics over workers and shards, the SUMMARY JSON, the curve and the
// child-line records, without processes.
#include "deploy/run_summary.h"

#include <cmath>

#include "common/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TimeToAccuracyTest, FirstPointAtOrAboveThreshold) {
  EXPECT_EQ(TimeToAccuracy({}, 0.85), -1);
  const std::vector<CurvePoint> curve = {
      {1.0, 0.70}, {2.5, 0.85}, {4.0, 0.84}, {6.0, 0.90}};
  EXPECT_DOUBLE_EQ(TimeToAccuracy(curve, 0.85), 2.5);
  EXPECT_DOUBLE_EQ(TimeToAccuracy(curve, 0.88), 6.0);
  EXPECT_EQ(TimeToAccuracy(curve, 0.95), -1);
}

TEST(RunSummaryTest, SummarizesWorkersAndShards) {
  LaunchOptions o;
  o.mode = TrainMode::kSsp;
  o.optimizer = "sgd";
  o.lr = 0.05;
  RunRecord r;
  DoneReport d0, d1;
  d0.steps = 100;
  d0.examples = 6400;
  d0.final_loss = 0.3;
  d1.steps = 101;
  d1.examples = 6400;
  d1.final_loss = 0.4;
  r.done = {d0, d1};
  r.eval = {0.875, 0.33, 10000};
  r.server_stats = {
      {{"staleness_mean", 1.0}, {"staleness_max", 3}, {"staleness_p50", 1},
       {"staleness_p99", 3}, {"dropped_stale", 4}, {"pushes_applied", 100}},
      {{"staleness_mean", 2.0}, {"staleness_max", 5}, {"staleness_p50", 2},
       {"staleness_p99", 4}, {"dropped_stale", 6}, {"pushes_applied", 300}}};
  r.curve = {{1.0, 0.80}, {2.0, 0.875}};
  r.training_seconds = 2.0;
  r.wall_seconds = 3.5;
  r.log_dir = "/tmp/logs";
  const Summary s = Summarize(o, r);
  EXPECT_EQ(s.mode, "ssp");
  EXPECT_EQ(s.steps, 201);
  EXPECT_EQ(s.examples, 12800);
  EXPECT_DOUBLE_EQ(s.final_loss, 0.35);
  EXPECT_DOUBLE_EQ(s.examples_per_sec, 6400);
  EXPECT_DOUBLE_EQ(*s.staleness_mean, 1.75);
  EXPECT_DOUBLE_EQ(*s.staleness_p50, 1.75);
  EXPECT_DOUBLE_EQ(*s.staleness_max, 5);
  EXPECT_DOUBLE_EQ(*s.staleness_p99, 4);
  EXPECT_EQ(*s.dropped_stale, 10);
  EXPECT_DOUBLE_EQ(s.time_to_85.value_or(0), 2.0);
  EXPECT_EQ(s.time_to_88.value_or(0), -1);
  EXPECT_EQ(s.ToJson(),
            "{\"mode\":\"ssp\",\"servers\":2,\"workers\":2,\"epochs\":3,"
            "\"batch_size\":64,\"optimizer\":\"sgd\",\"lr\":0.05,"
            "\"steps\":201,\"examples\":12800,\"wall_seconds\":3.5,"
            "\"training_seconds\":2,\"examples_per_sec\":6400,"
            "\"final_loss\":0.35,\"test_accuracy\":0.875,\"test_loss\":0.33,"
            "\"bad_images\":0,\"time_to_85\":2,\"time_to_88\":-1,\"staleness_mean\":1.75,"
            "\"staleness_max\":5,\"staleness_p50\":1.75,\"staleness_p99\":4,"
            "\"dropped_stale\":10,\"log_dir\":\"/tmp/logs\"}");
  // The SUMMARY line reads back through the shared report parser.
  auto back = ParseTaggedJson("SUMMARY " + s.ToJson(), "SUMMARY");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->at("steps"), 201);
}

// Sandblaster's servers run L-BFGS: SUMMARY names it and gives no learning
// rate, whatever --optimizer and --lr say.
TEST(RunSummaryTest, SandblasterNamesLbfgsAndNoLearningRate) {
  LaunchOptions o;
  o.mode = TrainMode::kSandblaster;
  o.optimizer = "adam";
  o.lr = 0.001;
  RunRecord r;
  const Summary s = Summarize(o, r);
  EXPECT_EQ(s.optimizer, "lbfgs");
  EXPECT_FALSE(s.lr.has_value());
  const std::string json = s.ToJson();
  EXPECT_NE(json.find("\"mode\":\"sandblaster\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"optimizer\":\"lbfgs\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\"lr\""), std::string::npos) << json;
}

TEST(RunSummaryTest, ShardsWithoutWeightsAndNumberFormat) {
  LaunchOptions o;
  RunRecord r;
  r.server_stats = {{{"staleness_mean", 1.0}}, {{"staleness_mean", 2.0},
                                                {"pushes_applied", 10}}};
  r.training_seconds = 1.0 / 3;
  const Summary s = Summarize(o, r);
  EXPECT_DOUBLE_EQ(*s.staleness_mean, 1.5);  // Plain mean.
  EXPECT_FALSE(s.staleness_max.has_value());
  EXPECT_FALSE(s.dropped_stale.has_value());
  EXPECT_TRUE(std::isnan(s.final_loss));  // No worker reported.
  const std::string json = s.ToJson();
  EXPECT_THAT(json, HasSubstr("\"training_seconds\":0.3333333333,"));
  EXPECT_THAT(json, HasSubstr("\"final_loss\":null,"));
  EXPECT_THAT(json, Not(HasSubstr("staleness_max")));
}

TEST(RunSummaryTest, RecordsChildLinesByRole) {
  ChildReport w;
  RecordChildLine(TaskRole::kWorker,
                  "worker 0: step 10, loss = 0.5 (1000.0 examples/sec; 0.064 "
                  "sec/batch) [data 1%]",
                  &w);
  RecordChildLine(TaskRole::kWorker,
                  "DONE {\"worker\":0,\"steps\":100,\"examples\":6400,"
                  "\"final_loss\":0.3,\"seconds\":1.5}",
                  &w);
  RecordChildLine(TaskRole::kWorker, "EVAL {\"test_accuracy\":1,"
                  "\"test_loss\":1}", &w);
  ASSERT_TRUE(w.latest.has_value());
  EXPECT_EQ(w.latest->step, 10);
  ASSERT_TRUE(w.done.has_value());
  EXPECT_EQ(w.done->steps, 100);
  EXPECT_FALSE(w.eval.has_value());  // Workers do not evaluate.

  ChildReport e;
  RecordChildLine(TaskRole::kCurveEval,
                  "EVAL {\"test_accuracy\":0.8,\"test_loss\":0.5,"
                  "\"examples\":500}",
                  &e);
  RecordChildLine(TaskRole::kEval, "SERVER_STATS {\"shard\":1}", &e);
  ASSERT_TRUE(e.eval.has_value());
  EXPECT_DOUBLE_EQ(e.eval->test_accuracy, 0.8);
  ASSERT_EQ(e.server_stats.size(), 1u);
  EXPECT_EQ(e.server_stats[0].at("shard"), 1);

  ChildReport s;
  RecordChildLine(TaskRole::kServer, "SERVER_STATS {\"shard\":0}", &s);
  RecordChildLine(TaskRole::kServer, "DONE {}", &s);
  EXPECT_EQ(s.server_stats.size(), 1u);
  EXPECT_FALSE(s.done.has_value());
}

TEST(RunSummaryTest, RateCurveAndCsvLines) {
  EXPECT_FALSE(ClusterRateLine({}).has_value());
  WorkerProgress a, b;
  a.step = 10;
  a.examples_per_sec = 1000;
  b.step = 20;
  b.examples_per_sec = 1500.5;
  EXPECT_EQ(ClusterRateLine({a, b}),
            "cluster: 2500.5 examples/sec (2 workers, step 20)");
  EXPECT_EQ(CurveLine({1.25, 0.8}), "curve: t=1.2 s test_accuracy=0.8000");
  EXPECT_EQ(CurveCsv({{1.25, 0.8}, {3, 0.875}}),
            "seconds,test_accuracy\n1.250,0.8\n3.000,0.875\n");
}

}  // namespace
}  // namespace downpour
