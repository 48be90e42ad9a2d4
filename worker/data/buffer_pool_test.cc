// File: worker/data/buffer_pool_test.cc
//
// Tests for Batch and the pool its buffers are recycled through.
#include "worker/data/buffer_pool.h"

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

TEST(BatcherTest, HandBuiltBatchIsAPlainValue) {
  Batch b;
  b.size = 2;
  b.images = *HostArray<float>::Create(DefaultHostAllocator(), 8, /*zero=*/true);
  b.labels = *HostArray<int32_t>::Create(DefaultHostAllocator(), 2, /*zero=*/true);
  Batch moved = std::move(b);
  EXPECT_EQ(moved.images.size(), 8u);
  EXPECT_EQ(moved.labels[1], 0);
}

TEST(BatchBufferPoolTest, RecyclesBuffersOfTheSameSize) {
  CountingAllocator alloc;
  auto pool = std::make_shared<data_internal::BatchBufferPool>(&alloc);
  ASSERT_TRUE(pool->Reserve(2, 12, 3).ok());
  EXPECT_EQ(alloc.allocations(), 4);
  float* first = nullptr;
  {
    Batch b;
    ASSERT_TRUE(pool->Fill(12, 3, &b).ok());
    first = b.images.data();
    EXPECT_EQ(b.images.size(), 12u);
    EXPECT_EQ(b.labels.size(), 3u);
  }  // Back to the pool, not to the allocator.
  EXPECT_EQ(alloc.frees(), 0);
  Batch again;
  ASSERT_TRUE(pool->Fill(12, 3, &again).ok());
  EXPECT_EQ(alloc.allocations(), 4);
  EXPECT_EQ(again.images.data(), first);  // The same buffer again.
  // Another size is a fresh allocation.
  Batch other;
  ASSERT_TRUE(pool->Fill(8, 2, &other).ok());
  EXPECT_EQ(alloc.allocations(), 6);
}

TEST(BatchBufferPoolTest, AllocationFailureIsResourceExhausted) {
  CountingAllocator alloc(/*limit=*/1);
  auto pool = std::make_shared<data_internal::BatchBufferPool>(&alloc);
  absl::Status s = pool->Reserve(1, 12, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("counting"));
  Batch b;
  EXPECT_EQ(pool->Fill(12, 3, &b).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace data_testing
}  // namespace downpour
