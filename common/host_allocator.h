// File: common/host_allocator.h
//
// Where host-side staging buffers come from. The input pipeline writes
// batches into memory from a HostAllocator, and the trainer keeps its host
// copies of parameters and gradients there, so a device backend can hand out
// page-locked (pinned) memory that its DMA engine reads and writes directly,
// while the CPU backend hands out ordinary aligned memory.
//
// Usage:
//   HostAllocator* alloc = DefaultHostAllocator();  // or a backend's pinned one
//   DP_ASSIGN_OR_RETURN(HostArray<float> buf,
//                       HostArray<float>::Create(alloc, 1 << 20));
//   std::memcpy(buf.data(), src, buf.size() * sizeof(float));
//
// A failed allocation (pinned memory runs out long before pageable memory
// does) is a ResourceExhausted status naming the allocator, never an
// exception.
//
// Thread-safety: Allocate/Free are thread-safe for every implementation.
#ifndef DOWNPOUR_COMMON_HOST_ALLOCATOR_H_
#define DOWNPOUR_COMMON_HOST_ALLOCATOR_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace downpour {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // At least `bytes` bytes, 64-byte aligned, or nullptr on failure.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // e.g. "malloc" or "cuda-pinned".
  virtual const char* Name() const = 0;
  // Whether a device copies to and from this memory directly (pinned):
  // a staging buffer from it should not be swapped for ordinary memory.
  virtual bool device_mapped() const { return false; }
};

// 64-byte-aligned malloc. The returned object lives for the whole process
// (it is stateless; this is not a registry).
HostAllocator* DefaultHostAllocator();

// An owning array of trivially copyable T from a HostAllocator (move-only).
// Contents are uninitialized unless `zero` is true.
template <typename T>
class HostArray {
 public:
  HostArray() = default;

  // `n` elements from `alloc` (none when n == 0), or ResourceExhausted when
  // the allocator has no memory for them.
  static absl::StatusOr<HostArray> Create(HostAllocator* alloc, size_t n,
                                          bool zero = false) {
    HostArray a;
    a.alloc_ = alloc;
    if (n == 0) return a;
    a.data_ = static_cast<T*>(alloc->Allocate(n * sizeof(T)));
    if (a.data_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", n * sizeof(T), " bytes from the ",
                       alloc->Name(), " host allocator"));
    }
    a.size_ = n;
    if (zero) std::memset(a.data_, 0, n * sizeof(T));
    return a;
  }

  HostArray(HostArray&& o) noexcept { *this = std::move(o); }
  HostArray& operator=(HostArray&& o) noexcept {
    if (this != &o) {
      Reset();
      alloc_ = o.alloc_;
      data_ = o.data_;
      size_ = o.size_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  ~HostArray() { Reset(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  HostAllocator* allocator() const { return alloc_; }

 private:
  void Reset() {
    if (data_ != nullptr) alloc_->Free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  HostAllocator* alloc_ = nullptr;  // Not owned.
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_HOST_ALLOCATOR_H_
