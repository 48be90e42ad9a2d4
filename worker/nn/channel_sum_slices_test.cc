#include "worker/nn/channel_sum_slices.h"

#include <climits>
#include <cstdint>

#include "gtest/gtest.h"

namespace downpour {
namespace {

// The limits hold across shapes from tiny to huge: every image in exactly
// one slice, at most 65535 slices, at most INT_MAX elements a slice; only a
// shape that needs more slices than that has no plan.
TEST(ChannelSumSlicesTest, LimitsHoldForEveryShape) {
  const int batches[] = {1, 2, 7, 64, 70, 1024, 65535, 65536, 1 << 20,
                         INT_MAX};
  const int64_t hws[] = {1, 25, 256, 676, 16384, 16385, 1 << 20,
                         int64_t{1} << 30, INT_MAX};
  for (int batch : batches) {
    for (int64_t hw : hws) {
      const ChannelSumSlices s = PlanChannelSum(batch, hw);
      SCOPED_TRACE(testing::Message() << "batch " << batch << " hw " << hw);
      const int64_t max_per = INT_MAX / hw;
      if ((batch + max_per - 1) / max_per > 65535) {
        EXPECT_EQ(s.parts, 0);
        continue;
      }
      ASSERT_GE(s.per, 1);
      ASSERT_GE(s.parts, 1);
      EXPECT_LE(s.parts, 65535);
      EXPECT_LE(int64_t{s.per} * hw, int64_t{INT_MAX});
      EXPECT_GE(int64_t{s.per} * s.parts, batch);
      EXPECT_LT(int64_t{s.per} * (s.parts - 1), batch);  // No empty slice.
    }
  }
}

TEST(ChannelSumSlicesTest, AboutSixteenThousandElementsASlice) {
  // fashion_cnn's first convolution at batch 1024: 26 x 26 outputs.
  ChannelSumSlices s = PlanChannelSum(1024, 676);
  EXPECT_EQ(s.per, 25);
  EXPECT_EQ(s.parts, 41);
  // The GPU test's shape: 70 images of 16 x 16, two slices (64 + 6).
  s = PlanChannelSum(70, 256);
  EXPECT_EQ(s.per, 64);
  EXPECT_EQ(s.parts, 2);
  // Small batches: one slice.
  s = PlanChannelSum(3, 25);
  EXPECT_EQ(s.per, 3);
  EXPECT_EQ(s.parts, 1);
}

TEST(ChannelSumSlicesTest, EmptyAndUnplannableShapesHaveNoSlices) {
  EXPECT_EQ(PlanChannelSum(0, 100).parts, 0);
  EXPECT_EQ(PlanChannelSum(5, 0).parts, 0);
  EXPECT_EQ(PlanChannelSum(-1, 100).parts, 0);
  EXPECT_EQ(PlanChannelSum(5, int64_t{INT_MAX} + 1).parts, 0);
}

}  // namespace
}  // namespace downpour
