// File: worker/data/augment_test.cc
//
// Tests for the per-example draws and the crop / flip / normalize transform
// (the batcher tests check the same through whole batches).
#include "worker/data/augment.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data_test_util.h"

namespace downpour {
namespace data_testing {
namespace {

using ::testing::HasSubstr;

using data_internal::AugmentKey;
using data_internal::ExampleTransform;
using data_internal::SplitMix64;
using data_internal::UniformBelow;

TEST(AugmentTest, DrawsArePinnedAcrossPlatforms) {
  // Reference values of the SplitMix64 finalizer (from its published
  // generator seeded with 0: the first output mixes 0x9e3779b97f4a7c15).
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
  std::mt19937_64 gen(42);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(UniformBelow(gen, 7), 7u);
  EXPECT_EQ(AugmentKey(1, 0, 0, 5), AugmentKey(1, 0, 0, 5));
  EXPECT_NE(AugmentKey(1, 0, 0, 5), AugmentKey(1, 0, 0, 6));
  EXPECT_NE(AugmentKey(1, 0, 0, 5), AugmentKey(1, 1, 0, 5));
  EXPECT_NE(AugmentKey(1, 0, 0, 5), AugmentKey(1, 0, 1, 5));
}

TEST(AugmentTest, IdentityWhenNothingIsOn) {
  ExampleTransform t;
  t.channels = 1;
  t.height = 2;
  t.width = 3;
  EXPECT_TRUE(t.IsIdentity());
  const float src[6] = {1, 2, 3, 4, 5, 6};
  float dst[6] = {};
  t.Apply(src, dst, 123);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dst[i], src[i]);
}

TEST(AugmentTest, ApplyMatchesTheReferenceForEveryDraw) {
  const Dataset d = MakeImageDataset(1, 2, 4, 5);
  ExampleTransform t;
  t.channels = 2;
  t.height = 4;
  t.width = 5;
  t.augment.random_crop_padding = 2;
  t.augment.horizontal_flip = true;
  t.normalize_mean = {0.5f, 0.25f};
  t.normalize_std = {2.0f, 4.0f};
  EXPECT_FALSE(t.IsIdentity());
  int flips = 0;
  for (uint64_t key = 0; key < 200; ++key) {
    std::vector<float> got(d.ExampleSize());
    t.Apply(d.images.data(), got.data(), AugmentKey(7, 0, 0, key));
    const Match m = FindTransform(d, got.data(), d.labels[0], 2, true,
                                  t.normalize_mean, t.normalize_std);
    ASSERT_GE(m.count, 1) << "key " << key;
    flips += m.flip ? 1 : 0;
  }
  EXPECT_GT(flips, 60);
  EXPECT_LT(flips, 140);
}

// Without a crop every row takes the copy path: plain, flipped,
// normalized, or both.
TEST(AugmentTest, ApplyWithoutCropMatchesTheReference) {
  const Dataset d = MakeImageDataset(1, 2, 4, 5);
  for (const bool normalize : {false, true}) {
    ExampleTransform t;
    t.channels = 2;
    t.height = 4;
    t.width = 5;
    t.augment.horizontal_flip = true;
    if (normalize) {
      t.normalize_mean = {0.5f, 0.25f};
      t.normalize_std = {2.0f, 4.0f};
    }
    int flips = 0;
    for (uint64_t key = 0; key < 64; ++key) {
      std::vector<float> got(d.ExampleSize());
      t.Apply(d.images.data(), got.data(), AugmentKey(7, 0, 0, key));
      const Match m = FindTransform(d, got.data(), d.labels[0], 0, true,
                                    t.normalize_mean, t.normalize_std);
      ASSERT_GE(m.count, 1) << "key " << key << " normalize " << normalize;
      flips += m.flip ? 1 : 0;
    }
    EXPECT_GT(flips, 10) << normalize;
    EXPECT_LT(flips, 54) << normalize;
  }
}

}  // namespace
}  // namespace data_testing
}  // namespace downpour
