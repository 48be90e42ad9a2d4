// File: common/report_test.cc
//
// Each report line round-trips through its formatter and parser, the parsers
// keep reading the exact lines older workers printed, and other lines are
// refused.
#include "common/report.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(ReportTest, ParsesProgressLine) {
  auto p = ParseProgressLine(
      "worker 1: step 120, loss = 0.412 (3150.2 examples/sec; 0.020 "
      "sec/batch) [data 1% compute 80% pull 10% push 9%]");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->worker, 1);
  EXPECT_EQ(p->step, 120);
  EXPECT_DOUBLE_EQ(p->loss, 0.412);
  EXPECT_DOUBLE_EQ(p->examples_per_sec, 3150.2);
}

TEST(ReportTest, ProgressLineToleratesNanLoss) {
  auto p = ParseProgressLine(
      "worker 0: step 5, loss = nan (100.0 examples/sec; 0.6 sec/batch)");
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(std::isnan(p->loss));
  EXPECT_DOUBLE_EQ(p->examples_per_sec, 100.0);
}

TEST(ReportTest, RejectsOtherLines) {
  EXPECT_FALSE(ParseProgressLine("worker 1: loading data").has_value());
  EXPECT_FALSE(ParseProgressLine("ps 0: step 3, loss = 1 (2 examples/sec")
                   .has_value());
  EXPECT_FALSE(ParseProgressLine("").has_value());
}

TEST(ReportTest, ProgressRoundTrip) {
  WorkerProgress p;
  p.worker = 3;
  p.step = 120;
  p.loss = 0.412;
  p.examples_per_sec = 3150.2;
  p.sec_per_batch = 0.02;
  p.shares = "[data 1% compute 80% pull 10% push 9%]";
  const std::string line = FormatProgressLine(p);
  EXPECT_EQ(line,
            "worker 3: step 120, loss = 0.412 (3150.2 examples/sec; 0.020 "
            "sec/batch) [data 1% compute 80% pull 10% push 9%]");
  auto back = ParseProgressLine(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->worker, 3);
  EXPECT_EQ(back->step, 120);
  EXPECT_DOUBLE_EQ(back->loss, 0.412);
  EXPECT_DOUBLE_EQ(back->examples_per_sec, 3150.2);
}

TEST(ReportTest, ParsesTaggedJson) {
  auto d = ParseTaggedJson(
      "DONE {\"worker\":1,\"steps\":940,\"examples\":60000,"
      "\"final_loss\":0.31,\"seconds\":55.2}",
      "DONE");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->at("worker"), 1);
  EXPECT_EQ(d->at("steps"), 940);
  EXPECT_EQ(d->at("examples"), 60000);
  EXPECT_DOUBLE_EQ(d->at("final_loss"), 0.31);
  EXPECT_FALSE(ParseTaggedJson("DONE {\"a\":1", "DONE").has_value());
  EXPECT_FALSE(ParseTaggedJson("EVAL {\"a\":1}", "DONE").has_value());
  EXPECT_FALSE(ParseTaggedJson("DONEX {\"a\":1}", "DONE").has_value());
  EXPECT_FALSE(ParseTaggedJson("DONE [1]", "DONE").has_value());
}

TEST(ReportTest, SkipsNonNumericAndNestedMembers) {
  auto j = ParseJsonNumbers(
      R"( {"name":"a\"b}", "nested":{"x":[1,2,{"y":null}]}, "ok":true,)"
      R"( "neg":-1.5e2, "list":[], "z":0} )");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->size(), 2u);
  EXPECT_DOUBLE_EQ(j->at("neg"), -150);
  EXPECT_DOUBLE_EQ(j->at("z"), 0);
  EXPECT_FALSE(ParseJsonNumbers("{\"a\":}").ok());
  EXPECT_FALSE(ParseJsonNumbers("{\"a\":1} x").ok());
  EXPECT_THAT(std::string(ParseJsonNumbers("[1]").status().message()),
              ::testing::HasSubstr("malformed JSON"));
}

TEST(ReportTest, DoneRoundTrip) {
  DoneReport d;
  d.worker = 1;
  d.steps = 940;
  d.examples = 60000;
  d.pushes = 470;
  d.final_loss = 0.31;
  d.seconds = 55.2;
  d.time_data = 1.5;
  d.time_compute = 40.25;
  d.time_pull = 6.125;
  d.time_push = 7.5;
  d.verdict = "compute-bound \"ok\"";
  d.bad_images = 3;
  const std::string line = FormatDoneLine(d);
  EXPECT_EQ(line,
            "DONE {\"worker\":1,\"steps\":940,\"examples\":60000,"
            "\"pushes\":470,\"final_loss\":0.31000,\"seconds\":55.200,"
            "\"time_data\":1.500,\"time_compute\":40.250,"
            "\"time_pull\":6.125,\"time_push\":7.500,"
            "\"verdict\":\"compute-bound \\\"ok\\\"\",\"bad_images\":3}");
  std::optional<DoneReport> back = ParseDoneLine(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->worker, 1);
  EXPECT_EQ(back->steps, 940);
  EXPECT_EQ(back->examples, 60000);
  EXPECT_EQ(back->pushes, 470);
  EXPECT_DOUBLE_EQ(back->final_loss, 0.31);
  EXPECT_DOUBLE_EQ(back->seconds, 55.2);
  EXPECT_DOUBLE_EQ(back->time_data, 1.5);
  EXPECT_DOUBLE_EQ(back->time_compute, 40.25);
  EXPECT_DOUBLE_EQ(back->time_pull, 6.125);
  EXPECT_DOUBLE_EQ(back->time_push, 7.5);
  EXPECT_EQ(back->verdict, d.verdict);
  EXPECT_EQ(back->bad_images, 3);
}

TEST(ReportTest, DoneLineNeedsItsCoreMembers) {
  // The short form the launcher's test scripts print is enough.
  auto d = ParseDoneLine(
      "DONE {\"worker\":0,\"steps\":100,\"examples\":6400,"
      "\"final_loss\":0.3,\"seconds\":1.5}");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->pushes, 0);
  EXPECT_TRUE(d->verdict.empty());
  EXPECT_FALSE(ParseDoneLine("DONE {\"worker\":0,\"steps\":100}").has_value());
  EXPECT_FALSE(ParseDoneLine("EVAL {\"worker\":0}").has_value());
}

TEST(ReportTest, EvalRoundTrip) {
  const EvalReport e{0.8843, 0.33, 10000};
  const std::string line = FormatEvalLine(e);
  EXPECT_EQ(line,
            "EVAL {\"test_accuracy\":0.88430,\"test_loss\":0.33000,"
            "\"examples\":10000}");
  std::optional<EvalReport> back = ParseEvalLine(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->test_accuracy, 0.8843);
  EXPECT_DOUBLE_EQ(back->test_loss, 0.33);
  EXPECT_EQ(back->examples, 10000);
  EXPECT_FALSE(ParseEvalLine("EVAL {\"test_loss\":0.3}").has_value());
  EXPECT_FALSE(ParseEvalLine("DONE {\"test_accuracy\":0.3,\"test_loss\":1}")
                   .has_value());
}

TEST(ReportTest, ServerStatsRoundTrip) {
  ShardStats s;
  s.shard_index = 1;
  s.num_shards = 2;
  s.pushes_applied = 300;
  s.staleness_mean = 1.75;
  s.staleness_max = 5;
  s.staleness_p50 = 2;
  s.staleness_p99 = 4;
  s.dropped_stale = 6;
  s.rejected["wrong_size"] = 3;
  s.evicted_workers = {2};
  const std::string line = FormatServerStatsLine(s);
  EXPECT_EQ(line.rfind("SERVER_STATS {\"shard\":1,", 0), 0u) << line;
  std::optional<JsonNumbers> back = ParseServerStatsLine(line);
  ASSERT_TRUE(back.has_value()) << line;
  EXPECT_EQ(back->at("shard"), 1);
  EXPECT_EQ(back->at("num_shards"), 2);
  EXPECT_EQ(back->at("pushes_applied"), 300);
  EXPECT_DOUBLE_EQ(back->at("staleness_mean"), 1.75);
  EXPECT_EQ(back->at("staleness_max"), 5);
  EXPECT_EQ(back->at("staleness_p50"), 2);
  EXPECT_EQ(back->at("staleness_p99"), 4);
  EXPECT_EQ(back->at("dropped_stale"), 6);
  EXPECT_EQ(back->count("rejected"), 0u);  // An object, not a number.
  EXPECT_FALSE(ParseServerStatsLine("EVAL {\"shard\":1}").has_value());
}

}  // namespace
}  // namespace downpour
