// File: worker/nn/backend.cc
//
// Backend-independent pieces of backend.h: the DeviceBuffer RAII owner, the
// descriptor checks every backend shares and the default implementations.
#include "worker/nn/backend.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {

absl::Status Backend::Copy(const float* src, float* dst, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("Copy: negative size");
  if (src == dst || n == 0) return absl::OkStatus();
  absl::Status s = Fill(dst, n, 0.f);
  if (!s.ok()) return s;
  return Axpy(n, 1.f, src, dst);
}

absl::Status Backend::Conv2dReluForward(const ConvDesc& d, const float* x,
                                        const float* w, const float* b,
                                        float* y) {
  absl::Status s = Conv2dForward(d, x, w, b, y);
  if (!s.ok()) return s;
  // y's element count (the caller holds a buffer of that size).
  const int64_t n = int64_t{d.batch} * d.out_channels * d.OutH() * d.OutW();
  return ReluForward(n, y, y);
}

namespace {
absl::Status NotImplemented(const Backend& b, const char* op) {
  return absl::UnimplementedError(
      absl::StrCat(op, " is not implemented by backend ", b.Name()));
}
}  // namespace

absl::Status Backend::AvgPoolForward(const PoolDesc&, const float*, float*) {
  return NotImplemented(*this, "AvgPoolForward");
}
absl::Status Backend::AvgPoolBackward(const PoolDesc&, const float*, float*) {
  return NotImplemented(*this, "AvgPoolBackward");
}
absl::Status Backend::BatchNormForwardTraining(const BatchNormDesc&,
                                               const float*, const float*,
                                               const float*, float, float*,
                                               float*, float*, float*,
                                               float*) {
  return NotImplemented(*this, "BatchNormForwardTraining");
}
absl::Status Backend::BatchNormForwardInference(const BatchNormDesc&,
                                                const float*, const float*,
                                                const float*, const float*,
                                                const float*, float*) {
  return NotImplemented(*this, "BatchNormForwardInference");
}
absl::Status Backend::BatchNormBackward(const BatchNormDesc&, const float*,
                                        const float*, const float*,
                                        const float*, const float*, float*,
                                        float*, float*) {
  return NotImplemented(*this, "BatchNormBackward");
}
absl::Status Backend::BatchNormReluForwardTraining(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, float momentum, float* running_mean, float* running_var,
    float* y, float* save_mean, float* save_invstd) {
  DP_RETURN_IF_ERROR(BatchNormForwardTraining(d, x, gamma, beta, momentum,
                                              running_mean, running_var, y,
                                              save_mean, save_invstd));
  return ReluForward(d.Size(), y, y);
}
absl::Status Backend::BatchNormReluForwardInference(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var,
    float* y) {
  DP_RETURN_IF_ERROR(BatchNormForwardInference(d, x, gamma, beta,
                                               running_mean, running_var, y));
  return ReluForward(d.Size(), y, y);
}
absl::Status Backend::DropoutMask(int64_t, float, uint64_t, float*) {
  return NotImplemented(*this, "DropoutMask");
}
absl::Status Backend::Multiply(int64_t, const float*, const float*, float*) {
  return NotImplemented(*this, "Multiply");
}
absl::Status Backend::CopyRows(int64_t, int64_t, const float*, int64_t,
                               float*, int64_t) {
  return NotImplemented(*this, "CopyRows");
}

absl::Status Backend::Discard(float* /*p*/, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("Discard: negative size");
  return absl::OkStatus();
}

HostAllocator* Backend::staging_allocator() { return DefaultHostAllocator(); }

absl::Status Backend::SoftmaxCrossEntropyDeferred(
    int batch, int classes, const float* logits, const float* labels,
    float label_smoothing, float* dlogits, float* host_loss,
    int64_t* host_correct) {
  return SoftmaxCrossEntropy(batch, classes, logits, labels, label_smoothing,
                             dlogits, host_loss, host_correct);
}

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

absl::Status ValidateAllocation(int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocate: negative size ", n));
  }
  if (n > std::numeric_limits<int64_t>::max() / 8) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Allocate: ", n, " floats is too large"));
  }
  return absl::OkStatus();
}

absl::Status ValidateConv(const ConvDesc& d, const char* op) {
  if (d.batch < 0 || d.in_channels < 1 || d.in_h < 1 || d.in_w < 1 ||
      d.out_channels < 1 || d.kernel_h < 1 || d.kernel_w < 1 || d.stride < 1 ||
      d.pad < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad ConvDesc (batch=", d.batch, " in=", d.in_channels, "x",
        d.in_h, "x", d.in_w, " out_channels=", d.out_channels,
        " kernel=", d.kernel_h, "x", d.kernel_w, " stride=", d.stride,
        " pad=", d.pad, ")"));
  }
  if (d.in_h + 2 * d.pad < d.kernel_h || d.in_w + 2 * d.pad < d.kernel_w) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": kernel ", d.kernel_h, "x", d.kernel_w,
                     " larger than padded input ", d.in_h + 2 * d.pad, "x",
                     d.in_w + 2 * d.pad));
  }
  return absl::OkStatus();
}

absl::Status ValidatePool(const PoolDesc& d, const char* op) {
  if (d.batch < 0 || d.channels < 1 || d.window < 1 || d.stride < 0 ||
      d.pad < 0 || 2 * d.pad > d.window || d.in_h + 2 * d.pad < d.window ||
      d.in_w + 2 * d.pad < d.window) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad PoolDesc (batch=", d.batch, " channels=", d.channels,
        " in=", d.in_h, "x", d.in_w, " window=", d.window,
        " stride=", d.stride, " pad=", d.pad, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchNorm(const BatchNormDesc& d, const char* op) {
  if (d.batch < 1 || d.channels < 1 || d.spatial < 1 || !(d.eps > 0.f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad BatchNormDesc (batch=", d.batch, " channels=", d.channels,
        " spatial=", d.spatial, " eps=", d.eps, ")"));
  }
  return absl::OkStatus();
}

float DropoutUniform(uint64_t seed, uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * 0x1.0p-24f;
}

absl::Status ValidateGemm(int m, int n, int k) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: negative dimension m=", m, " n=", n, " k=", k));
  }
  return absl::OkStatus();
}

absl::Status ValidateSoftmaxShape(int batch, int classes) {
  if (batch < 1 || classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SoftmaxCrossEntropy: bad shape batch=", batch,
                     " classes=", classes));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelSmoothing(float label_smoothing) {
  if (!(label_smoothing >= 0.f && label_smoothing < 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SoftmaxCrossEntropy: label smoothing ", label_smoothing,
                     " is not in [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace downpour
