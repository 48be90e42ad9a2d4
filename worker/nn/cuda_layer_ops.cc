// File: worker/nn/cuda_layer_ops.cc (see cuda_layer_ops.h).
#include "worker/nn/cuda_layer_ops.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "worker/nn/cuda_kernels.h"
#include "worker/nn/cuda_status.h"
#include "worker/nn/op_checks.h"

namespace downpour {
namespace {

cuda_kernels::PoolGeometry Geometry(const PoolDesc& d) {
  return cuda_kernels::PoolGeometry{int64_t{d.batch} * d.channels,
                                    d.in_h,
                                    d.in_w,
                                    d.window,
                                    d.Stride(),
                                    d.pad,
                                    d.OutH(),
                                    d.OutW()};
}

}  // namespace

CudaLayerOps::~CudaLayerOps() {
  if (discarded_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaFree(discarded_);
    (void)cudaGetLastError();
  }
}

absl::StatusOr<PoolDescriptors*> CudaLayerOps::Pool(const PoolDesc& d,
                                                    cudnnPoolingMode_t mode) {
  const PoolKey key = {d.batch,  d.channels, d.in_h, d.in_w,
                       d.window, d.Stride(), d.pad,  static_cast<int>(mode)};
  auto it = pools_.find(key);
  if (it != pools_.end()) return it->second.get();
  DP_ASSIGN_OR_RETURN(std::unique_ptr<PoolDescriptors> pd,
                      PoolDescriptors::Create(d, mode));
  PoolDescriptors* raw = pd.get();
  pools_.emplace(key, std::move(pd));
  return raw;
}

absl::StatusOr<BatchNormDescriptors*> CudaLayerOps::BatchNorm(
    const BatchNormDesc& d) {
  const BatchNormKey key = {d.batch, d.channels, d.spatial};
  auto it = norms_.find(key);
  if (it != norms_.end()) return it->second.get();
  DP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNormDescriptors> bd,
                      BatchNormDescriptors::Create(d));
  BatchNormDescriptors* raw = bd.get();
  norms_.emplace(key, std::move(bd));
  return raw;
}

absl::StatusOr<float*> CudaLayerOps::Discarded(int channels) {
  if (channels <= discarded_size_) return discarded_;
  // Queued work may still write the old buffer.
  DP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (discarded_ != nullptr) {
    DP_CUDA_RETURN_IF_ERROR(cudaFree(discarded_));
    discarded_ = nullptr;
    discarded_size_ = 0;
  }
  void* p = nullptr;
  DP_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, sizeof(float) * channels));
  discarded_ = static_cast<float*>(p);
  discarded_size_ = channels;
  return discarded_;
}

// ---- Pooling ----------------------------------------------------------------

absl::Status CudaLayerOps::MaxPoolForward(const PoolDesc& d, const float* x,
                                          float* y) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "MaxPoolForward"));
  if (d.batch == 0) return absl::OkStatus();
  DP_ASSIGN_OR_RETURN(const PoolDescriptors* pd, Pool(d, CUDNN_POOLING_MAX));
  const float one = 1.f, zero = 0.f;
  DP_CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(dnn_, pd->pool(), &one, pd->x(),
                                               x, &zero, pd->y(), y));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::AvgPoolForward(const PoolDesc& d, const float* x,
                                          float* y) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "AvgPoolForward"));
  if (d.batch == 0) return absl::OkStatus();
  DP_ASSIGN_OR_RETURN(const PoolDescriptors* pd,
                      Pool(d, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING));
  const float one = 1.f, zero = 0.f;
  DP_CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(dnn_, pd->pool(), &one, pd->x(),
                                               x, &zero, pd->y(), y));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::MaxPoolBackward(const PoolDesc& d, const float* x,
                                           const float* dy, float* dx) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "MaxPoolBackward"));
  DP_CUDA_RETURN_IF_ERROR(
      cuda_kernels::MaxPoolBackward(Geometry(d), x, dy, dx, stream_));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::AvgPoolBackward(const PoolDesc& d, const float* dy,
                                           float* dx) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "AvgPoolBackward"));
  DP_CUDA_RETURN_IF_ERROR(
      cuda_kernels::AvgPoolBackward(Geometry(d), dy, dx, stream_));
  return absl::OkStatus();
}

// ---- Batch normalization ----------------------------------------------------

absl::Status CudaLayerOps::BatchNormForwardTraining(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, float momentum, float* running_mean, float* running_var,
    float* y, float* save_mean, float* save_invstd) {
  DP_RETURN_IF_ERROR(CheckBatchNormTraining(d, momentum));
  DP_ASSIGN_OR_RETURN(const BatchNormDescriptors* bd, BatchNorm(d));
  // cuDNN moves both running statistics or neither: a missing one goes to
  // a buffer nobody reads.
  if ((running_mean == nullptr) != (running_var == nullptr)) {
    DP_ASSIGN_OR_RETURN(float* discarded, Discarded(d.channels));
    if (running_mean == nullptr) running_mean = discarded;
    if (running_var == nullptr) running_var = discarded;
  }
  const float one = 1.f, zero = 0.f;
  DP_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
      dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bd->x(), x, bd->x(), y,
      bd->channels(), gamma, beta, static_cast<double>(momentum), running_mean,
      running_var, static_cast<double>(d.eps), save_mean, save_invstd));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::BatchNormForwardInference(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var,
    float* y) {
  DP_RETURN_IF_ERROR(ValidateBatchNorm(d, "BatchNormForwardInference"));
  DP_ASSIGN_OR_RETURN(const BatchNormDescriptors* bd, BatchNorm(d));
  const float one = 1.f, zero = 0.f;
  DP_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
      dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bd->x(), x, bd->x(), y,
      bd->channels(), gamma, beta, running_mean, running_var,
      static_cast<double>(d.eps)));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::BatchNormBackward(
    const BatchNormDesc& d, const float* x, const float* dy, const float* gamma,
    const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
    float* dbeta) {
  DP_RETURN_IF_ERROR(ValidateBatchNorm(d, "BatchNormBackward"));
  DP_ASSIGN_OR_RETURN(const BatchNormDescriptors* bd, BatchNorm(d));
  const float one = 1.f, zero = 0.f;
  // Overwrites dx, dgamma and dbeta (beta factors 0).
  DP_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
      dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, bd->x(), x,
      bd->x(), dy, bd->x(), dx, bd->channels(), gamma, dgamma, dbeta,
      static_cast<double>(d.eps), save_mean, save_invstd));
  return absl::OkStatus();
}

// ---- Elementwise and copies -------------------------------------------------

absl::Status CudaLayerOps::DropoutMask(int64_t n, float rate, uint64_t seed,
                                       float* mask) {
  DP_RETURN_IF_ERROR(CheckDropoutMask(n, rate));
  DP_CUDA_RETURN_IF_ERROR(cuda_kernels::DropoutMask(n, rate, DropoutScale(rate),
                                                    seed, mask, stream_));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::Multiply(int64_t n, const float* a, const float* b,
                                    float* y) {
  DP_RETURN_IF_ERROR(CheckSize(n, "Multiply"));
  DP_CUDA_RETURN_IF_ERROR(cuda_kernels::Multiply(n, a, b, y, stream_));
  return absl::OkStatus();
}

absl::Status CudaLayerOps::CopyRows(int64_t rows, int64_t cols,
                                    const float* src, int64_t src_stride,
                                    float* dst, int64_t dst_stride) {
  DP_RETURN_IF_ERROR(CheckCopyRows(rows, cols, src_stride, dst_stride));
  if (rows == 0 || cols == 0) return absl::OkStatus();
  // One row may come with any strides; cudaMemcpy2D wants pitch >= width.
  const size_t width = sizeof(float) * static_cast<size_t>(cols);
  const size_t spitch = sizeof(float) * std::max(src_stride, cols);
  const size_t dpitch = sizeof(float) * std::max(dst_stride, cols);
  DP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width,
                                            static_cast<size_t>(rows),
                                            cudaMemcpyDeviceToDevice, stream_));
  return absl::OkStatus();
}

}  // namespace downpour
