// File: worker/data/batcher_test.cc
//
// Tests for the Batcher: sharding, shuffling, threads, augmentation,
// normalization and buffer recycling, through its public interface.
#include "worker/data/batcher.h"

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

TEST(BatcherTest, RejectsBadOptions) {
  Dataset d = MakeDataset(5);
  auto bad = [&](BatcherOptions o, const std::string& what) {
    absl::StatusOr<std::unique_ptr<Batcher>> b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(b.status().message(), HasSubstr(what));
  };
  BatcherOptions o;
  o.batch_size = 0;
  bad(o, "batch_size");
  o = BatcherOptions();
  o.num_workers = 0;
  bad(o, "num_workers");
  o = BatcherOptions();
  o.worker_index = 2;
  o.num_workers = 2;
  bad(o, "worker_index");
  o.worker_index = -1;
  bad(o, "worker_index");
  o = BatcherOptions();
  o.epochs = -1;
  bad(o, "epochs");
  o = BatcherOptions();
  o.prefetch = 0;
  bad(o, "prefetch");
  o = BatcherOptions();
  o.num_workers = 6;
  o.worker_index = 5;
  bad(o, "no examples");
}

TEST(BatcherTest, ShardsAreDisjointAndCoverEverything) {
  const Dataset d = MakeDataset(103);
  constexpr int kWorkers = 4;
  std::multiset<int64_t> seen;
  for (int w = 0; w < kWorkers; ++w) {
    BatcherOptions o;
    o.worker_index = w;
    o.num_workers = kWorkers;
    o.batch_size = 7;
    o.epochs = 2;
    const auto epochs = Drain(d, o);
    ASSERT_EQ(epochs.size(), 2u);
    // Both epochs are permutations of the same shard: i = w mod W.
    std::multiset<int64_t> e0(epochs[0].begin(), epochs[0].end());
    std::multiset<int64_t> e1(epochs[1].begin(), epochs[1].end());
    EXPECT_EQ(e0, e1);
    EXPECT_EQ(e0.size(), w < 3 ? 26u : 25u);
    for (int64_t i : e0) EXPECT_EQ(i % kWorkers, w);
    seen.insert(e0.begin(), e0.end());
  }
  ASSERT_EQ(seen.size(), 103u);
  int64_t expect = 0;
  for (int64_t i : seen) EXPECT_EQ(i, expect++);  // Each index exactly once.
}

TEST(BatcherTest, ReshufflesEachEpochDeterministically) {
  const Dataset d = MakeDataset(200);
  BatcherOptions o;
  o.batch_size = 16;
  o.epochs = 3;
  o.seed = 42;
  const auto a = Drain(d, o);
  const auto b = Drain(d, o);
  EXPECT_EQ(a, b);  // Same seed: same orders.
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  std::vector<int64_t> natural(200);
  for (int i = 0; i < 200; ++i) natural[i] = i;
  EXPECT_NE(a[0], natural);

  o.seed = 43;
  EXPECT_NE(Drain(d, o)[0], a[0]);
  // Another worker of the same job gets a different permutation pattern.
  o.seed = 42;
  o.num_workers = 2;
  const auto w0 = Drain(d, o);
  o.worker_index = 1;
  const auto w1 = Drain(d, o);
  std::vector<int64_t> w1_shifted;
  for (int64_t i : w1[0]) w1_shifted.push_back(i - 1);
  EXPECT_NE(w0[0], w1_shifted);
}

TEST(BatcherTest, LastPartialBatch) {
  const Dataset d = MakeDataset(23);
  BatcherOptions o;
  o.batch_size = 10;
  o.epochs = 2;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->BatchesPerEpoch(), 3);
  std::vector<std::pair<int, int>> got;  // (epoch, size)
  while (std::optional<Batch> batch = (*b)->Next()) {
    got.emplace_back(batch->epoch, batch->size);
  }
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{
                     {0, 10}, {0, 10}, {0, 3}, {1, 10}, {1, 10}, {1, 3}}));
  EXPECT_FALSE((*b)->Next().has_value());  // Stays exhausted.
}

TEST(BatcherTest, ZeroEpochsYieldsNothing) {
  const Dataset d = MakeDataset(5);
  BatcherOptions o;
  o.epochs = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE((*b)->Next().has_value());
}

TEST(BatcherTest, EarlyDestructionDoesNotHang) {
  const Dataset d = MakeDataset(1000);
  BatcherOptions o;
  o.batch_size = 3;
  o.epochs = 50;
  o.prefetch = 2;
  for (int consumed = 0; consumed < 4; ++consumed) {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int i = 0; i < consumed; ++i) ASSERT_TRUE((*b)->Next().has_value());
    // Destroyed here with the producer blocked on a full queue.
  }
}

TEST(BatcherTest, ContentDoesNotDependOnThreadsOrPrefetch) {
  const Dataset d = MakeImageDataset(57, 3, 5, 6);
  BatcherOptions o;
  o.batch_size = 8;
  o.epochs = 3;
  o.seed = 7;
  o.augment.random_crop_padding = 2;
  o.augment.horizontal_flip = true;
  o.normalize_mean = {0.5f, 0.25f, 0.125f};
  o.normalize_std = {0.2f, 0.3f, 0.4f};
  o.num_threads = 1;
  o.prefetch = 1;
  const std::vector<BatchCopy> one = DrainCopies(d, o);
  ASSERT_EQ(one.size(), 3u * 8);
  for (auto [threads, prefetch] :
       {std::pair{3, 5}, std::pair{2, 2}, std::pair{4, 16}}) {
    o.num_threads = threads;
    o.prefetch = prefetch;
    const std::vector<BatchCopy> many = DrainCopies(d, o);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_TRUE(many[i] == one[i])
          << "batch " << i << " differs with " << threads << " threads";
    }
  }
  // Augmentation is on: the same example differs between epochs.
  o.augment = AugmentOptions();
  const std::vector<BatchCopy> plain = DrainCopies(d, o);
  ASSERT_EQ(plain.size(), one.size());
  int differ = 0;
  for (size_t i = 0; i < one.size(); ++i) differ += !(plain[i] == one[i]);
  EXPECT_GT(differ, 20);
  // Another seed gives other augmentations (and orders).
  o.augment.random_crop_padding = 2;
  o.seed = 8;
  EXPECT_FALSE(DrainCopies(d, o)[0] == one[0]);
}

TEST(BatcherTest, RandomCropIsAShiftedCopyWithZeroPadding) {
  const Dataset d = MakeImageDataset(40, 2, 5, 6);
  BatcherOptions o;
  o.batch_size = 7;
  o.epochs = 10;
  o.augment.random_crop_padding = 2;
  std::set<std::pair<int, int>> offsets;
  std::map<int64_t, int> seen;
  int examples = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const Match m =
          FindTransform(d, batch->images.data() + k * d.ExampleSize(),
                        batch->labels[k], 2, /*try_flip=*/false, {}, {});
      ASSERT_EQ(m.count, 1) << "batch example " << k;
      offsets.insert({m.dy, m.dx});
      ++seen[m.example];
      ++examples;
    }
  }
  EXPECT_EQ(examples, 400);
  EXPECT_EQ(seen.size(), 40u);  // Every example, every epoch.
  for (const auto& [i, n] : seen) EXPECT_EQ(n, 10) << i;
  EXPECT_EQ(offsets.size(), 25u);  // All of [-2, 2]^2 occur.
}

TEST(BatcherTest, FlipMirrorsAboutHalfTheTime) {
  const Dataset d = MakeImageDataset(50, 1, 3, 4);
  BatcherOptions o;
  o.batch_size = 16;
  o.epochs = 8;
  o.augment.horizontal_flip = true;
  int flipped = 0, total = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const Match m =
          FindTransform(d, batch->images.data() + k * d.ExampleSize(),
                        batch->labels[k], 0, /*try_flip=*/true, {}, {});
      ASSERT_EQ(m.count, 1);
      flipped += m.flip;
      ++total;
    }
  }
  EXPECT_EQ(total, 400);
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
}

TEST(BatcherTest, CropFlipAndNormalizeTogether) {
  const Dataset d = MakeImageDataset(30, 3, 4, 4);
  BatcherOptions o;
  o.batch_size = 9;
  o.epochs = 4;
  o.num_threads = 3;
  o.augment.random_crop_padding = 1;
  o.augment.horizontal_flip = true;
  o.normalize_mean = {10.f, 300.f, 500.f};
  o.normalize_std = {2.f, 0.5f, 4.f};
  int padded_pixels = 0, examples = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const float* got = batch->images.data() + k * d.ExampleSize();
      const Match m = FindTransform(d, got, batch->labels[k], 1, true,
                                    o.normalize_mean, o.normalize_std);
      ASSERT_EQ(m.count, 1);
      ++examples;
      // Padding is zero before normalization: -mean / std after.
      for (int64_t p = 0; p < d.ExampleSize(); ++p) {
        const int ch = static_cast<int>(p / 16);
        padded_pixels +=
            got[p] == (0.f - o.normalize_mean[ch]) / o.normalize_std[ch];
      }
    }
  }
  EXPECT_EQ(examples, 120);
  EXPECT_GT(padded_pixels, 0);
}

TEST(BatcherTest, NormalizationOnly) {
  const Dataset d = MakeImageDataset(12, 2, 3, 3);
  BatcherOptions o;
  o.batch_size = 5;
  o.normalize_mean = {0.5f, -2.0f};
  o.normalize_std = {0.25f, 3.0f};
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  int checked = 0;
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const float* got = batch->images.data() + k * d.ExampleSize();
      // Identify the example by its first pixel, which is 1 + i / 1024.
      const int64_t i = std::lround((got[0] * 0.25f + 0.5f - 1.0f) * 1024.0f);
      ASSERT_GE(i, 0);
      ASSERT_LT(i, 12);
      ASSERT_EQ(batch->labels[k], i % 10);
      const float* in = d.images.data() + i * d.ExampleSize();
      for (int64_t p = 0; p < d.ExampleSize(); ++p) {
        const int ch = static_cast<int>(p / 9);
        EXPECT_FLOAT_EQ(got[p],
                        (in[p] - o.normalize_mean[ch]) / o.normalize_std[ch]);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12 * 18);
}

TEST(BatcherTest, RejectsBadAugmentAndThreadOptions) {
  Dataset d = MakeImageDataset(5, 3, 2, 2);
  auto bad = [&](const BatcherOptions& o, const std::string& what) {
    absl::StatusOr<std::unique_ptr<Batcher>> b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(b.status().message(), HasSubstr(what));
  };
  BatcherOptions o;
  o.num_threads = 0;
  bad(o, "num_threads");
  o = BatcherOptions();
  o.augment.random_crop_padding = -1;
  bad(o, "random_crop_padding");
  o = BatcherOptions();
  o.normalize_mean = {0.f, 0.f, 0.f};
  bad(o, "normalize_mean");
  o.normalize_std = {1.f, 1.f};
  bad(o, "normalize_mean");
  o.normalize_std = {1.f, 0.f, 1.f};
  bad(o, "channel 1");
  o = BatcherOptions();
  o.allocator = nullptr;  // Means the default allocator.
  EXPECT_TRUE(Batcher::Create(&d, o).ok());
}

TEST(BatcherTest, BuffersAreRecycled) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(103, 3, 4, 4);
  BatcherOptions o;
  o.batch_size = 10;  // 10 full batches and one of 3 per epoch.
  o.epochs = 40;
  o.prefetch = 3;
  o.num_threads = 2;
  o.allocator = &alloc;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    // Create reserves prefetch + 1 image and label buffers.
    EXPECT_EQ(alloc.allocations(), 2 * (o.prefetch + 1));
    int batches = 0;
    while (std::optional<Batch> batch = (*b)->Next()) {
      EXPECT_EQ(batch->images.allocator(), &alloc);
      EXPECT_EQ(batch->labels.allocator(), &alloc);
      ++batches;
    }
    EXPECT_EQ(batches, 40 * 11);
    // Full batches never need more than the reserve; the partial batches
    // share one more pair (they are 11 batches apart, prefetch is 3).
    EXPECT_EQ(alloc.allocations(), 2 * (o.prefetch + 1) + 2);
  }
  EXPECT_EQ(alloc.frees(), alloc.allocations());
}

TEST(BatcherTest, ConsumerHoldingManyBatchesStillRecycles) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(100, 1, 2, 2);
  BatcherOptions o;
  o.batch_size = 10;
  o.epochs = 20;
  o.prefetch = 2;
  o.allocator = &alloc;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int round = 0; round < 20; ++round) {
      std::vector<Batch> held;
      for (int i = 0; i < 10; ++i) {
        std::optional<Batch> batch = (*b)->Next();
        ASSERT_TRUE(batch.has_value());
        held.push_back(std::move(*batch));
      }
    }
    EXPECT_FALSE((*b)->Next().has_value());
    // 10 held + 2 in flight (+1 slack for timing), independent of rounds.
    EXPECT_LE(alloc.allocations(), 2 * (10 + o.prefetch + 1));
  }
  EXPECT_EQ(alloc.frees(), alloc.allocations());
}

TEST(BatcherTest, BatchOutlivesBatcher) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(30, 1, 2, 3);
  BatcherOptions o;
  o.batch_size = 4;
  o.epochs = 5;
  o.num_threads = 3;
  o.allocator = &alloc;
  std::vector<Batch> kept;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int i = 0; i < 3; ++i) {
      std::optional<Batch> batch = (*b)->Next();
      ASSERT_TRUE(batch.has_value());
      kept.push_back(std::move(*batch));
    }
    // The batcher goes with batches still in flight and in its queue.
  }
  for (const Batch& batch : kept) {
    ASSERT_EQ(batch.size, 4);
    for (int k = 0; k < batch.size; ++k) {
      const int64_t i = std::lround((batch.images[k * 6] - 1.0f) * 1024.0f);
      EXPECT_EQ(batch.labels[k], i % 10);
      // The last pixel, (y, x) = (1, 2), is 1 + 2 + 16 plus i / 1024.
      EXPECT_EQ(batch.images[k * 6 + 5],
                19.0f + static_cast<float>(i) / 1024.0f);
    }
  }
  // Move-assigning over a pooled batch hands its buffers back, too.
  kept[0] = std::move(kept[1]);
  EXPECT_EQ(kept[1].images.size(), 0u);
  kept.clear();
  EXPECT_EQ(alloc.frees(), alloc.allocations());
  EXPECT_GT(alloc.allocations(), 0);
}

TEST(BatcherTest, AllocationFailures) {
  const Dataset d = MakeImageDataset(40, 1, 2, 2);
  BatcherOptions o;
  o.batch_size = 4;
  o.epochs = 2;
  o.prefetch = 2;
  {
    CountingAllocator none(0);
    o.allocator = &none;
    auto b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(b.status().message(), HasSubstr("counting"));
  }
  {
    // Exactly the reserve: a consumer that keeps every batch runs out.
    CountingAllocator reserve_only(2 * (o.prefetch + 1));
    o.allocator = &reserve_only;
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    std::vector<Batch> held;
    while (std::optional<Batch> batch = (*b)->Next()) {
      held.push_back(std::move(*batch));
    }
    EXPECT_EQ(held.size(), static_cast<size_t>(o.prefetch + 1));
    EXPECT_EQ((*b)->status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_FALSE((*b)->Next().has_value());
  }
}

}  // namespace
}  // namespace data_testing
}  // namespace downpour
