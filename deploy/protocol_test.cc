#include "deploy/protocol.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(ProtocolTest, ParsesProgressLine) {
  auto p = ParseProgressLine(
      "worker 1: step 120, loss = 0.412 (3150.2 examples/sec; 0.020 "
      "sec/batch) [data 1% compute 80% pull 10% push 9%]");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->worker, 1);
  EXPECT_EQ(p->step, 120);
  EXPECT_DOUBLE_EQ(p->loss, 0.412);
  EXPECT_DOUBLE_EQ(p->examples_per_sec, 3150.2);
}

TEST(ProtocolTest, ProgressLineToleratesNanLoss) {
  auto p = ParseProgressLine(
      "worker 0: step 5, loss = nan (100.0 examples/sec; 0.6 sec/batch)");
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(std::isnan(p->loss));
  EXPECT_DOUBLE_EQ(p->examples_per_sec, 100.0);
}

TEST(ProtocolTest, RejectsOtherLines) {
  EXPECT_FALSE(ParseProgressLine("worker 1: loading data").has_value());
  EXPECT_FALSE(ParseProgressLine("ps 0: step 3, loss = 1 (2 examples/sec")
                   .has_value());
  EXPECT_FALSE(ParseProgressLine("").has_value());
}

TEST(ProtocolTest, ParsesTaggedJson) {
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
}

TEST(ProtocolTest, SkipsNonNumericAndNestedMembers) {
  auto j = ParseJsonNumbers(
      R"( {"name":"a\"b}", "nested":{"x":[1,2,{"y":null}]}, "ok":true,)"
      R"( "neg":-1.5e2, "list":[], "z":0} )");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->size(), 2u);
  EXPECT_DOUBLE_EQ(j->at("neg"), -150);
  EXPECT_DOUBLE_EQ(j->at("z"), 0);
  EXPECT_FALSE(ParseJsonNumbers("{\"a\":}").ok());
  EXPECT_FALSE(ParseJsonNumbers("{\"a\":1} x").ok());
}

TEST(ProtocolTest, JsonWriter) {
  JsonWriter w;
  w.Add("mode", "as\"ync").Add("steps", int64_t{940}).Add("lr", 0.05);
  w.Add("bad", NAN).AddNull("n");
  EXPECT_EQ(w.str(),
            R"({"mode":"as\"ync","steps":940,"lr":0.05,"bad":null,"n":null})");
  auto round_trip = ParseJsonNumbers(w.str());
  ASSERT_TRUE(round_trip.ok());
  EXPECT_DOUBLE_EQ(round_trip->at("lr"), 0.05);
}

}  // namespace
}  // namespace downpour
