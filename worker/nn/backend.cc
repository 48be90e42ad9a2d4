// File: worker/nn/backend.cc
//
// Backend-independent pieces of backend.h: the DeviceBuffer RAII owner.
#include "worker/nn/backend.h"

#include <utility>

namespace downpour {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(Backend* backend, int64_t n) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("DeviceBuffer::Create: null backend");
  }
  if (n < 0) {
    return absl::InvalidArgumentError("DeviceBuffer::Create: negative size " +
                                      std::to_string(n));
  }
  absl::StatusOr<float*> p = backend->Allocate(n);
  if (!p.ok()) return p.status();
  DeviceBuffer b;
  b.backend_ = backend;
  b.data_ = *p;
  b.size_ = n;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr && backend_ != nullptr) backend_->Free(data_);
    backend_ = std::exchange(o.backend_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr && backend_ != nullptr) backend_->Free(data_);
}

}  // namespace downpour
