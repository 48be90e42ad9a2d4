// File: worker/nn/cuda_status.h
//
// Turns CUDA runtime, cuDNN and cuBLAS error codes into absl::Status values
// that name the failing call (NCCL's CUDACHECK pattern, returning instead of
// aborting). Shared by the host-side CUDA units of worker/nn (cuda_backend.cc,
// cudnn_descriptors.cc, cudnn_conv_algos.cc); nothing outside worker/nn uses
// it.
//
// Usage, inside a function returning absl::Status or absl::StatusOr<T>:
//   DP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
//   DP_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d));
//   DP_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream));
//
// Status codes: out-of-memory errors become ResourceExhausted; a missing or
// too old driver, no device or no kernel image for the device become
// FailedPrecondition; cuDNN's NOT_SUPPORTED family and
// BAD_PARAM_MISALIGNED_POINTER (an engine that needs more alignment than
// the buffers have) become Unimplemented, which the convolution algorithm
// retry (conv_algo_choice.h) answers with the next algorithm; everything
// else is Internal.
//
// Side effects: CudaError clears the calling thread's CUDA last-error slot
// (sticky errors cannot be cleared; the message then says the context is
// unusable), and CudnnError consumes cuDNN's last error message, attaching
// it to the status.
//
// Thread-safety: the functions are thread-safe; the state they read and
// clear (CUDA's last error, cuDNN's last message) is per thread.
#ifndef DOWNPOUR_WORKER_NN_CUDA_STATUS_H_
#define DOWNPOUR_WORKER_NN_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "absl/status/status.h"

namespace downpour {

// `expr` is the text of the failing call, used in the message.
absl::Status CudaError(cudaError_t e, const char* expr);
absl::Status CudnnError(cudnnStatus_t s, const char* expr);
absl::Status CublasError(cublasStatus_t s, const char* expr);

// The absl code CudnnError gives `s` (pure: no cuDNN call).
absl::StatusCode CudnnStatusCode(cudnnStatus_t s);

}  // namespace downpour

#define DP_CUDA_RETURN_IF_ERROR(expr)                          \
  do {                                                         \
    const cudaError_t dp_cuda_err_ = (expr);                   \
    if (dp_cuda_err_ != cudaSuccess) {                         \
      return ::downpour::CudaError(dp_cuda_err_, #expr);       \
    }                                                          \
  } while (0)

#define DP_CUDNN_RETURN_IF_ERROR(expr)                         \
  do {                                                         \
    const cudnnStatus_t dp_cudnn_st_ = (expr);                 \
    if (dp_cudnn_st_ != CUDNN_STATUS_SUCCESS) {                \
      return ::downpour::CudnnError(dp_cudnn_st_, #expr);      \
    }                                                          \
  } while (0)

#define DP_CUBLAS_RETURN_IF_ERROR(expr)                        \
  do {                                                         \
    const cublasStatus_t dp_cublas_st_ = (expr);               \
    if (dp_cublas_st_ != CUBLAS_STATUS_SUCCESS) {              \
      return ::downpour::CublasError(dp_cublas_st_, #expr);    \
    }                                                          \
  } while (0)

#endif  // DOWNPOUR_WORKER_NN_CUDA_STATUS_H_
