#include "worker/data/buffer_pool.h"

#include <utility>

#include "common/status_macros.h"

namespace downpour {
namespace data_internal {

absl::Status BatchBufferPool::Fill(size_t images, size_t labels,
                                   Batch* batch) {
  DP_ASSIGN_OR_RETURN(batch->images, Take(&free_images_, images));
  DP_ASSIGN_OR_RETURN(batch->labels, Take(&free_labels_, labels));
  batch->pool_ = shared_from_this();
  return absl::OkStatus();
}

absl::Status BatchBufferPool::Reserve(int count, size_t images,
                                      size_t labels) {
  for (int i = 0; i < count; ++i) {
    DP_ASSIGN_OR_RETURN(HostArray<float> im,
                        HostArray<float>::Create(alloc_, images));
    DP_ASSIGN_OR_RETURN(HostArray<int32_t> lb,
                        HostArray<int32_t>::Create(alloc_, labels));
    Return(std::move(im), std::move(lb));
  }
  return absl::OkStatus();
}

void BatchBufferPool::Return(HostArray<float> images,
                             HostArray<int32_t> labels) {
  absl::MutexLock lock(&mu_);
  if (!images.empty()) free_images_[images.size()].push_back(std::move(images));
  if (!labels.empty()) free_labels_[labels.size()].push_back(std::move(labels));
}

template <typename T>
absl::StatusOr<HostArray<T>> BatchBufferPool::Take(FreeLists<T>* lists,
                                                   size_t n) {
  if (n == 0) return HostArray<T>();
  {
    absl::MutexLock lock(&mu_);
    auto it = lists->find(n);
    if (it != lists->end() && !it->second.empty()) {
      HostArray<T> a = std::move(it->second.back());
      it->second.pop_back();
      return a;
    }
  }
  // Outside the lock: a pinned allocation can take milliseconds.
  return HostArray<T>::Create(alloc_, n);
}

}  // namespace data_internal

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    ReturnBuffers();
    size = o.size;
    epoch = o.epoch;
    images = std::move(o.images);
    labels = std::move(o.labels);
    pool_ = std::move(o.pool_);
  }
  return *this;
}

Batch::~Batch() { ReturnBuffers(); }

void Batch::ReturnBuffers() {
  if (pool_ == nullptr) return;  // Hand-built, or moved from.
  pool_->Return(std::move(images), std::move(labels));
  pool_.reset();
}

}  // namespace downpour
