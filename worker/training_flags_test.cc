#include "worker/training_flags.h"

#include "common/train_mode.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(WaitFreeBucketBytesTest, GivenSizeWins) {
  EXPECT_EQ(WaitFreeBucketBytes(64, TrainMode::kAsync, 1 << 20), 64 << 10);
  EXPECT_EQ(WaitFreeBucketBytes(4096, TrainMode::kSync, 1 << 20), 4096 << 10);
}

// 0: async pushes a part per call at least; sync and ssp keep small buckets
// so that most of the gradient has left when the backward pass ends.
TEST(WaitFreeBucketBytesTest, ZeroPicksByMode) {
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kAsync, 1 << 20), 1 << 20);
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kAsync, 4 << 10), 4 << 10);
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kSync, 1 << 20),
            TrainingFlags::kSyncBucketKb << 10);
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kSsp, 1 << 20),
            TrainingFlags::kSyncBucketKb << 10);
}

// Sync with deferred weight gradients sends a shard's gradient in parts, as
// async does: its first layer's shard is done early, the rest at the end.
TEST(WaitFreeBucketBytesTest, DeferredSyncTakesParts) {
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kSync, 1 << 20, true), 1 << 20);
  EXPECT_EQ(WaitFreeBucketBytes(64, TrainMode::kSync, 1 << 20, true),
            64 << 10);
  EXPECT_EQ(WaitFreeBucketBytes(0, TrainMode::kSsp, 1 << 20, true),
            TrainingFlags::kSyncBucketKb << 10);
}

}  // namespace
}  // namespace downpour
