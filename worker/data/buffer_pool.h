// File: worker/data/buffer_pool.h
//
// Batch, the unit the Batcher hands to the training loop, and the pool its
// buffers are recycled through. Steady-state training allocates nothing: a
// Batch's buffers go back to the pool (not to the HostAllocator) when it is
// destroyed or assigned over, and the batcher's producers take them again.
//
// Usage (inside the batcher):
//   auto pool = std::make_shared<data_internal::BatchBufferPool>(alloc);
//   DP_RETURN_IF_ERROR(pool->Reserve(5, images_per_batch, labels_per_batch));
//   Batch b;
//   DP_RETURN_IF_ERROR(pool->Fill(images, labels, &b));
//
// Thread-safety: the pool is thread-safe; a Batch is a value owned by one
// thread at a time. Ownership: the pool is shared by the batcher and every
// Batch it filled, so whichever goes last frees the memory; the HostAllocator
// is borrowed and must outlive both.
#ifndef DOWNPOUR_WORKER_DATA_BUFFER_POOL_H_
#define DOWNPOUR_WORKER_DATA_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/host_allocator.h"

namespace downpour {

namespace data_internal {
class BatchBufferPool;
}  // namespace data_internal

// One batch of examples, NCHW floats after augmentation and normalization.
// The buffers come from the batcher's pool of HostAllocator memory and go back
// to it (not to the allocator) when the Batch is destroyed or assigned over,
// so steady-state training allocates nothing. A Batch may outlive the Batcher
// that made it (the pool lives while any of its batches does), but not the
// HostAllocator. Move-only.
class Batch {
 public:
  int size = 0;
  int epoch = 0;              // 0-based epoch this batch belongs to.
  HostArray<float> images;    // size * ExampleSize()
  HostArray<int32_t> labels;  // size

  Batch() = default;
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&& o) noexcept;
  ~Batch();

 private:
  friend class data_internal::BatchBufferPool;
  void ReturnBuffers();
  // Where images/labels go back to; null for a Batch built by hand.
  std::shared_ptr<data_internal::BatchBufferPool> pool_;
};

namespace data_internal {

// Free lists of batch buffers, keyed by element count (a batcher needs two
// sizes: full batches and the epoch's last partial batch).
class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  explicit BatchBufferPool(HostAllocator* alloc) : alloc_(alloc) {}

  // Gives `batch` buffers of `images` floats and `labels` ints, recycled ones
  // when there are, else fresh ones (ResourceExhausted when the allocator
  // has no memory). Precondition: the pool is owned by a shared_ptr.
  absl::Status Fill(size_t images, size_t labels, Batch* batch);

  // Allocates `count` buffer pairs up front, so that running out of (pinned)
  // memory shows before training rather than in the middle of it.
  absl::Status Reserve(int count, size_t images, size_t labels);

  // Takes buffers back (empty ones are dropped).
  void Return(HostArray<float> images, HostArray<int32_t> labels);

  HostAllocator* allocator() const { return alloc_; }

 private:
  template <typename T>
  using FreeLists = std::map<size_t, std::vector<HostArray<T>>>;

  template <typename T>
  absl::StatusOr<HostArray<T>> Take(FreeLists<T>* lists, size_t n);

  HostAllocator* const alloc_;  // Not owned.
  absl::Mutex mu_;
  FreeLists<float> free_images_ ABSL_GUARDED_BY(mu_);
  FreeLists<int32_t> free_labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace data_internal
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_BUFFER_POOL_H_
