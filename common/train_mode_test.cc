#include "common/train_mode.h"

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(TrainModeTest, RoundTripsEveryMode) {
  for (TrainMode m : {TrainMode::kAsync, TrainMode::kSync, TrainMode::kSsp}) {
    auto parsed = ParseTrainMode(TrainModeName(m));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, m);
  }
}

TEST(TrainModeTest, RefusesUnknownNamesWithTheKnownOnes) {
  for (const char* bad : {"", "Async", "asynch", "sync ", "hogwild"}) {
    auto parsed = ParseTrainMode(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("async, sync, ssp"),
              absl::string_view::npos);
  }
}

}  // namespace
}  // namespace downpour
