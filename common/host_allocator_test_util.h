// File: common/host_allocator_test_util.h
//
// Test-only host allocators. FailingHostAllocator hands out nothing, as
// cudaHostAlloc does when pinned memory runs out, so a test can check that a
// failed allocation is an error status rather than a crash:
//
//   FailingHostAllocator failing;
//   EXPECT_FALSE(HostArray<float>::Create(&failing, 8).ok());
#ifndef DOWNPOUR_COMMON_HOST_ALLOCATOR_TEST_UTIL_H_
#define DOWNPOUR_COMMON_HOST_ALLOCATOR_TEST_UTIL_H_

#include <cstddef>

#include "common/host_allocator.h"

namespace downpour {

class FailingHostAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t) override { return nullptr; }
  void Free(void*) override {}
  const char* Name() const override { return "failing"; }
};

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_HOST_ALLOCATOR_TEST_UTIL_H_
