#include "common/host_allocator.h"

#include <cstdint>

#include "common/host_allocator_test_util.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(HostArrayTest, CreateAllocatesAndZeroes) {
  absl::StatusOr<HostArray<int32_t>> a =
      HostArray<int32_t>::Create(DefaultHostAllocator(), 100, /*zero=*/true);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
  for (int32_t v : *a) EXPECT_EQ(v, 0);
  EXPECT_EQ(a->allocator(), DefaultHostAllocator());
}

TEST(HostArrayTest, CreateOfZeroElementsIsEmpty) {
  FailingHostAllocator failing;
  absl::StatusOr<HostArray<float>> a = HostArray<float>::Create(&failing, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(a->data(), nullptr);
}

TEST(HostArrayTest, FailedAllocationIsResourceExhaustedNotAnException) {
  FailingHostAllocator failing;
  absl::StatusOr<HostArray<float>> a = HostArray<float>::Create(&failing, 16);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a.status().message().find("64 bytes"), std::string::npos);
  EXPECT_NE(a.status().message().find("failing"), std::string::npos);
}

TEST(HostArrayTest, MoveTransfersOwnership) {
  absl::StatusOr<HostArray<float>> a =
      HostArray<float>::Create(DefaultHostAllocator(), 8, /*zero=*/true);
  ASSERT_TRUE(a.ok());
  float* p = a->data();
  HostArray<float> b = std::move(*a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 8u);
  EXPECT_TRUE(a->empty());
}

}  // namespace
}  // namespace downpour
