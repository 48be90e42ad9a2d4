#include "common/host_allocator.h"

#include <cstdlib>

namespace downpour {
namespace {

class AlignedMallocAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override {
    // aligned_alloc needs a size that is a multiple of the alignment.
    size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  void Free(void* p) override { std::free(p); }
  const char* Name() const override { return "malloc"; }
};

}  // namespace

HostAllocator* DefaultHostAllocator() {
  static AlignedMallocAllocator* const kAllocator = new AlignedMallocAllocator;
  return kAllocator;
}

}  // namespace downpour
