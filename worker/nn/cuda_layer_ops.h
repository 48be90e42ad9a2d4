// File: worker/nn/cuda_layer_ops.h
//
// Internal to the CUDA backend (cuda_backend.cc): its pooling (max and
// average), batch-normalization, dropout-mask, Multiply and CopyRows
// operations, with the cuDNN descriptors they keep per shape. Contracts,
// argument checks and errors as backend.h says; work is queued on the
// backend's stream, nothing waits.
//
//  * Pooling forward: cuDNN (CUDNN_POOLING_MAX, which skips padded cells,
//    and CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING). Backward: custom
//    gathers (cuda_kernels.h), so that max pooling's gradient goes to each
//    window's first maximum (cuDNN does not document its tie rule) and the
//    sums run in the CPU backend's order; average pooling's backward needs
//    no x or y, which cudnnPoolingBackward would ask for.
//  * Batch normalization: cuDNN's CUDNN_BATCHNORM_SPATIAL training forward
//    (exponentialAverageFactor = momentum; it saves the mean and
//    1 / sqrt(var + eps), as backend.h's save_mean / save_invstd), inference
//    forward and backward. cuDNN moves the running variance with the
//    unbiased batch variance (N / (N - 1) times the one it normalizes with),
//    as PyTorch's BatchNorm, which hands its running_var to cuDNN unchanged;
//    the conformance suite checks it against the reference on a GPU.
//  * DropoutMask and Multiply: custom kernels; CopyRows: cudaMemcpy2DAsync.
//
// Usage (by the backend, with its device current):
//   DP_ASSIGN_OR_RETURN(auto ops, CudaLayerOps::Create(dnn, stream));
//   DP_RETURN_IF_ERROR(ops->MaxPoolForward(d, x, y));
//
// Thread-safety: as the backend, one thread at a time. The handle and
// stream are borrowed and must outlive the object.
#ifndef DOWNPOUR_WORKER_NN_CUDA_LAYER_OPS_H_
#define DOWNPOUR_WORKER_NN_CUDA_LAYER_OPS_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/nn/backend.h"
#include "worker/nn/cudnn_descriptors.h"

namespace downpour {

class CudaLayerOps {
 public:
  CudaLayerOps(cudnnHandle_t dnn, cudaStream_t stream)
      : dnn_(dnn), stream_(stream) {}
  CudaLayerOps(const CudaLayerOps&) = delete;
  CudaLayerOps& operator=(const CudaLayerOps&) = delete;
  // Waits for the stream before freeing its scratch buffer.
  ~CudaLayerOps();

  absl::Status MaxPoolForward(const PoolDesc& d, const float* x, float* y);
  absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                               const float* dy, float* dx);
  absl::Status AvgPoolForward(const PoolDesc& d, const float* x, float* y);
  absl::Status AvgPoolBackward(const PoolDesc& d, const float* dy, float* dx);

  absl::Status BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                                        const float* gamma, const float* beta,
                                        float momentum, float* running_mean,
                                        float* running_var, float* y,
                                        float* save_mean, float* save_invstd);
  absl::Status BatchNormForwardInference(const BatchNormDesc& d, const float* x,
                                         const float* gamma, const float* beta,
                                         const float* running_mean,
                                         const float* running_var, float* y);
  absl::Status BatchNormBackward(const BatchNormDesc& d, const float* x,
                                 const float* dy, const float* gamma,
                                 const float* save_mean,
                                 const float* save_invstd, float* dx,
                                 float* dgamma, float* dbeta);

  absl::Status DropoutMask(int64_t n, float rate, uint64_t seed, float* mask);
  absl::Status Multiply(int64_t n, const float* a, const float* b, float* y);
  absl::Status CopyRows(int64_t rows, int64_t cols, const float* src,
                        int64_t src_stride, float* dst, int64_t dst_stride);

 private:
  using PoolKey = std::array<int, 8>;
  using BatchNormKey = std::array<int, 3>;

  absl::StatusOr<PoolDescriptors*> Pool(const PoolDesc& d,
                                        cudnnPoolingMode_t mode);
  absl::StatusOr<BatchNormDescriptors*> BatchNorm(const BatchNormDesc& d);
  // Device memory for `channels` floats that cuDNN writes and nobody reads
  // (a running statistic the caller does not keep), grown on demand.
  absl::StatusOr<float*> Discarded(int channels);

  cudnnHandle_t const dnn_;    // Not owned.
  cudaStream_t const stream_;  // Not owned.
  std::map<PoolKey, std::unique_ptr<PoolDescriptors>> pools_;
  std::map<BatchNormKey, std::unique_ptr<BatchNormDescriptors>> norms_;
  float* discarded_ = nullptr;  // Owned device memory.
  int discarded_size_ = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDA_LAYER_OPS_H_
