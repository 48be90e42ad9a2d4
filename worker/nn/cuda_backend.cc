// File: worker/nn/cuda_backend.cc
//
// The CUDA implementation of Backend (see cuda_backend.h). Host code only,
// compiled by g++ against the C APIs of the CUDA runtime, cuDNN 9 and cuBLAS;
// the custom kernels live in cuda_kernels.cu (nvcc), the cuDNN descriptors
// in cudnn_descriptors.h, the cuDNN algorithm queries in cudnn_conv_algos.h
// and the error-to-Status macros in cuda_status.h.
//
// Verification and design: cuda_backend.h.
#include "worker/nn/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "common/status_macros.h"
#include "worker/nn/backend.h"
#include "worker/nn/conv_algo_choice.h"
#include "worker/nn/cuda_kernels.h"
#include "worker/nn/cuda_layer_ops.h"
#include "worker/nn/cuda_libs.h"
#include "worker/nn/cuda_status.h"
#include "worker/nn/cuda_versions.h"
#include "worker/nn/cudnn_conv_algos.h"
#include "worker/nn/cudnn_descriptors.h"

namespace downpour {
namespace {

// Prefixes a status message with where it happened.
absl::Status Annotate(const absl::Status& s, const std::string& where) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

// ---- The backend ------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, const CudaBackendOptions& options)
      : ordinal_(ordinal), options_(options) {}

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  ~CudaBackend() override {
    // Best effort: errors here cannot be reported, and a faulted context
    // makes every call fail anyway.
    if (cudaSetDevice(ordinal_) != cudaSuccess) (void)cudaGetLastError();
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (copy_stream_ != nullptr) (void)cudaStreamSynchronize(copy_stream_);
    conv_plans_.clear();
    layer_ops_.reset();
    if (workspace_ != nullptr) (void)cudaFree(workspace_);
    if (dev_result_ != nullptr) (void)cudaFree(dev_result_);
    if (host_result_ != nullptr) (void)cudaFreeHost(host_result_);
    if (dnn_ != nullptr) (void)cudnnDestroy(dnn_);
    if (blas_ != nullptr) (void)cublasDestroy(blas_);
    if (computed_ != nullptr) (void)cudaEventDestroy(computed_);
    if (copied_ != nullptr) (void)cudaEventDestroy(copied_);
    if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  // Creates the stream, handles and small buffers. The destructor releases
  // whatever was created if this fails halfway.
  absl::Status Init() {
    DP_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    if (options_.blocking_sync) {
      // Applies to the device's primary context, which cudaSetDevice above
      // has created (CUDA 12+), overwriting its earlier flags.
      const cudaError_t e = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        std::fprintf(stderr, "cuda:%d: blocking sync not set: %s\n", ordinal_,
                     cudaGetErrorString(e));
      }
    }
    cudaDeviceProp prop;
    DP_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = absl::StrCat("cuda:", ordinal_, " (", prop.name, ")");
    // The kernels are built for sm_80 and sm_90 (binary) and compute_90
    // (PTX, JIT-compiled for newer GPUs); nothing older can run them.
    if (prop.major < 8) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, " has compute capability ", prop.major, ".",
                       prop.minor, "; the CUDA backend needs 8.0 or newer"));
    }
    DP_CUDA_RETURN_IF_ERROR(cuda_kernels::CheckKernelImage());
    int runtime = 0;
    DP_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
    DP_RETURN_IF_ERROR(CheckCudnnVersions(CUDNN_VERSION, cudnnGetVersion(),
                                          cudnnGetCudartVersion(), runtime));

    DP_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DP_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    DP_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
    DP_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    DP_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas_));
    DP_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_, stream_));
    // CUBLAS_DEFAULT_MATH: sgemm computes with fp32 inputs (no TF32),
    // matching the CPU to rounding; allow_tf32 asks for TF32 tensor cores.
    DP_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
        blas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                   : CUBLAS_DEFAULT_MATH));
    DP_CUBLAS_RETURN_IF_ERROR(
        cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST));
    DP_CUDNN_RETURN_IF_ERROR(cudnnCreate(&dnn_));
    DP_CUDNN_RETURN_IF_ERROR(cudnnSetStream(dnn_, stream_));
    layer_ops_ = std::make_unique<CudaLayerOps>(dnn_, stream_);

    void* dev = nullptr;
    DP_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&dev, sizeof(cuda_kernels::SoftmaxXentResult)));
    dev_result_ = static_cast<cuda_kernels::SoftmaxXentResult*>(dev);
    void* host = nullptr;
    DP_CUDA_RETURN_IF_ERROR(cudaHostAlloc(
        &host, sizeof(cuda_kernels::SoftmaxXentResult), cudaHostAllocDefault));
    host_result_ = static_cast<cuda_kernels::SoftmaxXentResult*>(host);
    pinned_ = NewCudaPinnedHostAllocator(ordinal_);
    return absl::OkStatus();
  }

  HostAllocator* staging_allocator() override { return pinned_.get(); }

  std::string Name() const override { return name_; }

  // ---- Memory ---------------------------------------------------------------

  absl::StatusOr<float*> Allocate(int64_t n) override {
    DP_RETURN_IF_ERROR(ValidateAllocation(n));
    DP_RETURN_IF_ERROR(UseDevice());
    // At least one float, so that every allocation has a distinct address.
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * 4;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "Allocate: out of device memory for ", n, " floats on ", name_));
    }
    if (e != cudaSuccess) return CudaError(e, "cudaMalloc(&p, bytes)");
    const cudaError_t z = cudaMemsetAsync(p, 0, bytes, stream_);
    if (z != cudaSuccess) {
      (void)cudaFree(p);
      return CudaError(z, "cudaMemsetAsync(p, 0, bytes, stream_)");
    }
    return static_cast<float*>(p);
  }

  void Free(float* p) override {
    if (p == nullptr) return;
    // Queued work may still use p; cudaFree does not order itself after
    // work on a non-blocking stream.
    cudaError_t e = cudaSetDevice(ordinal_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      // Free has no way to return an error; leaking is the safe outcome.
      std::fprintf(stderr, "%s: Free(%p) failed: %s\n", name_.c_str(),
                   static_cast<void*>(p), cudaGetErrorString(e));
    }
  }

  absl::Status CopyToDevice(const float* host_src, float* dst,
                            int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("CopyToDevice: negative size");
    if (n == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_src, Bytes(n),
                                            cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const float* src, float* host_dst,
                          int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("CopyToHost: negative size");
    DP_RETURN_IF_ERROR(UseDevice());
    if (n > 0) {
      DP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, src, Bytes(n),
                                              cudaMemcpyDeviceToHost, stream_));
    }
    return SyncStream();
  }

  absl::Status Synchronize() override {
    DP_RETURN_IF_ERROR(UseDevice());
    return SyncStream();
  }

  absl::Status CopyToHostAsync(const float* src, float* host_dst,
                               int64_t n) override {
    if (n < 0) {
      return absl::InvalidArgumentError("CopyToHostAsync: negative size");
    }
    if (n == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    // After the work queued so far on the compute stream, on the copy
    // stream (the event is re-recorded per copy: each wait takes the
    // record before it).
    DP_CUDA_RETURN_IF_ERROR(cudaEventRecord(computed_, stream_));
    DP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, computed_, 0));
    DP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        host_dst, src, Bytes(n), cudaMemcpyDeviceToHost, copy_stream_));
    return absl::OkStatus();
  }

  // Touches only the copy stream (and the calling thread's current device),
  // so another thread may call it while this backend's thread queues work.
  absl::Status WaitHostCopies() override {
    DP_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    DP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
    return absl::OkStatus();
  }

  absl::Status OrderAfterHostCopies() override {
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_, copy_stream_));
    DP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, copied_, 0));
    return absl::OkStatus();
  }

  absl::Status Copy(const float* src, float* dst, int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("Copy: negative size");
    if (n == 0 || src == dst) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, Bytes(n),
                                            cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }

  // ---- Elementwise ----------------------------------------------------------

  absl::Status Fill(float* x, int64_t n, float value) override {
    if (n < 0) return absl::InvalidArgumentError("Fill: negative size");
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cuda_kernels::Fill(x, n, value, stream_));
    return absl::OkStatus();
  }

  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError("Axpy: negative size");
    if (n == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUBLAS_RETURN_IF_ERROR(cublasSaxpy_64(blas_, n, &alpha, x, 1, y, 1));
    return absl::OkStatus();
  }

  // ---- Dense ----------------------------------------------------------------

  // cuBLAS is column-major. A row-major matrix read as column-major is its
  // transpose, so row-major C = op(A) op(B) is computed as column-major
  // C^T = op(B)^T op(A)^T: swap the operands (and m with n), keep each
  // operand's own transpose flag and leading dimension.
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) override {
    DP_RETURN_IF_ERROR(ValidateGemm(m, n, k));
    if (m == 0 || n == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    const int64_t mn = int64_t{m} * n;
    if (k == 0) {  // C = beta * C; done here rather than trusting k == 0.
      if (beta == 0.f) {
        DP_CUDA_RETURN_IF_ERROR(cuda_kernels::Fill(c, mn, 0.f, stream_));
      } else if (beta != 1.f) {
        DP_CUBLAS_RETURN_IF_ERROR(cublasSscal_64(blas_, mn, &beta, c, 1));
      }
      return absl::OkStatus();
    }
    const int lda = std::max(1, trans_a ? m : k);
    const int ldb = std::max(1, trans_b ? k : n);
    DP_CUBLAS_RETURN_IF_ERROR(
        cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                    ldb, a, lda, &beta, c, n));
    return absl::OkStatus();
  }

  absl::Status AddRowBias(int rows, int cols, const float* bias,
                          float* y) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("AddRowBias: negative dimension");
    }
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(
        cuda_kernels::AddRowBias(rows, cols, bias, y, stream_));
    return absl::OkStatus();
  }

  absl::Status ColumnSum(int rows, int cols, const float* dy,
                         float* db) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("ColumnSum: negative dimension");
    }
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(
        cuda_kernels::ColumnSum(rows, cols, dy, db, stream_));
    return absl::OkStatus();
  }

  // ---- Convolution ----------------------------------------------------------

  absl::Status Conv2dForward(const ConvDesc& d, const float* x, const float* w,
                             const float* b, float* y) override {
    DP_RETURN_IF_ERROR(ValidateConv(d, "Conv2dForward"));
    if (d.batch == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    DP_ASSIGN_OR_RETURN(ConvPlan * plan, GetConvPlan(d));
    const ConvDescriptors& cd = *plan->desc;
    const float one = 1.f, zero = 0.f;
    const absl::Status s = RunWithAlgoRetry(
        &plan->fwd,
        [&](const std::set<int>& bad) {
          return ChooseForwardAlgo(dnn_, cd, Rules(), bad);
        },
        [&](const ConvAlgoChoice& c) -> absl::Status {
          DP_ASSIGN_OR_RETURN(void* ws, Workspace(c.workspace));
          DP_ASSIGN_OR_RETURN(auto conv, cd.WithMathType(c.math_type));
          DP_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
              dnn_, &one, cd.x(), x, cd.w(), w, conv,
              static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws, c.workspace,
              &zero, cd.y(), y));
          return absl::OkStatus();
        },
        Logger());
    if (!s.ok()) return Annotate(s, "Conv2dForward(" + ConvShape(d) + ")");
    if (b != nullptr) {
      // y += b broadcast over N, H, W.
      DP_CUDNN_RETURN_IF_ERROR(
          cudnnAddTensor(dnn_, &one, cd.bias(), b, &one, cd.y(), y));
    }
    return absl::OkStatus();
  }

  absl::Status Conv2dBackwardData(const ConvDesc& d, const float* w,
                                  const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(ValidateConv(d, "Conv2dBackwardData"));
    if (d.batch == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(UseDevice());
    DP_ASSIGN_OR_RETURN(ConvPlan * plan, GetConvPlan(d));
    const ConvDescriptors& cd = *plan->desc;
    const float one = 1.f, zero = 0.f;
    const absl::Status s = RunWithAlgoRetry(
        &plan->bwd_data,
        [&](const std::set<int>& bad) {
          return ChooseBackwardDataAlgo(dnn_, cd, Rules(), bad);
        },
        [&](const ConvAlgoChoice& c) -> absl::Status {
          DP_ASSIGN_OR_RETURN(void* ws, Workspace(c.workspace));
          DP_ASSIGN_OR_RETURN(auto conv, cd.WithMathType(c.math_type));
          DP_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
              dnn_, &one, cd.w(), w, cd.y(), dy, conv,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws,
              c.workspace, &zero, cd.x(), dx));
          return absl::OkStatus();
        },
        Logger());
    return Annotate(s, "Conv2dBackwardData(" + ConvShape(d) + ")");
  }

  absl::Status Conv2dBackwardFilter(const ConvDesc& d, const float* x,
                                    const float* dy, float* dw,
                                    float* db) override {
    DP_RETURN_IF_ERROR(ValidateConv(d, "Conv2dBackwardFilter"));
    DP_RETURN_IF_ERROR(UseDevice());
    if (d.batch == 0) {  // Empty sums.
      const int64_t wsize =
          int64_t{d.out_channels} * d.in_channels * d.kernel_h * d.kernel_w;
      DP_CUDA_RETURN_IF_ERROR(cuda_kernels::Fill(dw, wsize, 0.f, stream_));
      if (db != nullptr) {
        DP_CUDA_RETURN_IF_ERROR(
            cuda_kernels::Fill(db, d.out_channels, 0.f, stream_));
      }
      return absl::OkStatus();
    }
    DP_ASSIGN_OR_RETURN(ConvPlan * plan, GetConvPlan(d));
    const ConvDescriptors& cd = *plan->desc;
    const float one = 1.f, zero = 0.f;
    const absl::Status s = RunWithAlgoRetry(
        &plan->bwd_filter,
        [&](const std::set<int>& bad) {
          return ChooseBackwardFilterAlgo(dnn_, cd, Rules(), bad);
        },
        [&](const ConvAlgoChoice& c) -> absl::Status {
          DP_ASSIGN_OR_RETURN(void* ws, Workspace(c.workspace));
          DP_ASSIGN_OR_RETURN(auto conv, cd.WithMathType(c.math_type));
          DP_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
              dnn_, &one, cd.x(), x, cd.y(), dy, conv,
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws,
              c.workspace, &zero, cd.w(), dw));
          return absl::OkStatus();
        },
        Logger());
    if (!s.ok()) return Annotate(s, "Conv2dBackwardFilter(" + ConvShape(d) + ")");
    if (db != nullptr) {
      const int64_t hw = int64_t{d.OutH()} * d.OutW(), c = d.out_channels;
      DP_ASSIGN_OR_RETURN(void* ws, Workspace(sizeof(float) *
          cuda_kernels::ChannelSumScratchFloats(d.batch, c, hw)));
      DP_CUDA_RETURN_IF_ERROR(cuda_kernels::ChannelSum(
          d.batch, c, hw, dy, db, static_cast<float*>(ws), stream_));
    }
    return absl::OkStatus();
  }

  // ---- Activations and pooling ----------------------------------------------

  absl::Status ReluForward(int64_t n, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError("ReluForward: negative size");
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cuda_kernels::ReluForward(x, y, n, stream_));
    return absl::OkStatus();
  }

  absl::Status ReluBackward(int64_t n, const float* y, const float* dy,
                            float* dx) override {
    if (n < 0) return absl::InvalidArgumentError("ReluBackward: negative size");
    DP_RETURN_IF_ERROR(UseDevice());
    DP_CUDA_RETURN_IF_ERROR(cuda_kernels::ReluBackward(y, dy, dx, n, stream_));
    return absl::OkStatus();
  }

  // Pooling, batch norm and the small elementwise ops: cuda_layer_ops.h.
  absl::Status MaxPoolForward(const PoolDesc& d, const float* x,
                              float* y) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->MaxPoolForward(d, x, y);
  }
  absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                               const float* /*y*/, const float* dy,
                               float* dx) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->MaxPoolBackward(d, x, dy, dx);
  }
  absl::Status AvgPoolForward(const PoolDesc& d, const float* x,
                              float* y) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->AvgPoolForward(d, x, y);
  }
  absl::Status AvgPoolBackward(const PoolDesc& d, const float* dy,
                               float* dx) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->AvgPoolBackward(d, dy, dx);
  }
  absl::Status BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                                        const float* gamma, const float* beta,
                                        float momentum, float* running_mean,
                                        float* running_var, float* y,
                                        float* save_mean,
                                        float* save_invstd) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->BatchNormForwardTraining(d, x, gamma, beta, momentum,
                                                running_mean, running_var, y,
                                                save_mean, save_invstd);
  }
  absl::Status BatchNormForwardInference(const BatchNormDesc& d,
                                         const float* x, const float* gamma,
                                         const float* beta,
                                         const float* running_mean,
                                         const float* running_var,
                                         float* y) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->BatchNormForwardInference(d, x, gamma, beta,
                                                 running_mean, running_var, y);
  }
  absl::Status BatchNormBackward(const BatchNormDesc& d, const float* x,
                                 const float* dy, const float* gamma,
                                 const float* save_mean,
                                 const float* save_invstd, float* dx,
                                 float* dgamma, float* dbeta) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->BatchNormBackward(d, x, dy, gamma, save_mean,
                                         save_invstd, dx, dgamma, dbeta);
  }
  absl::Status DropoutMask(int64_t n, float rate, uint64_t seed,
                           float* mask) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->DropoutMask(n, rate, seed, mask);
  }
  absl::Status Multiply(int64_t n, const float* a, const float* b,
                        float* y) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->Multiply(n, a, b, y);
  }
  absl::Status CopyRows(int64_t rows, int64_t cols, const float* src,
                        int64_t src_stride, float* dst,
                        int64_t dst_stride) override {
    DP_RETURN_IF_ERROR(UseDevice());
    return layer_ops_->CopyRows(rows, cols, src, src_stride, dst, dst_stride);
  }

  // ---- Loss -----------------------------------------------------------------

  absl::Status SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                   const float* labels, float label_smoothing,
                                   float* dlogits, float* host_loss,
                                   int64_t* host_correct) override {
    DP_RETURN_IF_ERROR(SoftmaxCrossEntropyDeferred(
        batch, classes, logits, labels, label_smoothing, dlogits, host_loss,
        host_correct));
    return SyncStream();
  }

  // Queues the kernel and the copy of its result into pinned host memory;
  // the next SyncStream (Synchronize, CopyToHost) checks it and writes the
  // outputs, so a training step waits for the device once.
  absl::Status SoftmaxCrossEntropyDeferred(int batch, int classes,
                                           const float* logits,
                                           const float* labels,
                                           float label_smoothing,
                                           float* dlogits, float* host_loss,
                                           int64_t* host_correct) override {
    DP_RETURN_IF_ERROR(ValidateSoftmaxShape(batch, classes));
    DP_RETURN_IF_ERROR(ValidateLabelSmoothing(label_smoothing));
    DP_RETURN_IF_ERROR(UseDevice());
    // host_result_ is about to be overwritten: settle an unread result.
    if (pending_.active) DP_RETURN_IF_ERROR(SyncStream());
    DP_CUDA_RETURN_IF_ERROR(cuda_kernels::SoftmaxCrossEntropy(
        batch, classes, logits, labels, label_smoothing, dlogits, dev_result_,
        stream_));
    DP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_, dev_result_,
                                            sizeof(*host_result_),
                                            cudaMemcpyDeviceToHost, stream_));
    pending_ = PendingLoss{true, batch, classes, host_loss, host_correct};
    return absl::OkStatus();
  }

 private:
  // Descriptors and algorithm state (chosen, marked bad) of one
  // convolution shape.
  struct ConvPlan {
    std::unique_ptr<ConvDescriptors> desc;
    AlgoSlot fwd, bwd_data, bwd_filter;
  };
  // A queued SoftmaxCrossEntropyDeferred whose result is not read yet.
  struct PendingLoss {
    bool active = false;
    int batch = 0, classes = 0;
    float* host_loss = nullptr;       // Not owned; may be null.
    int64_t* host_correct = nullptr;  // Not owned; may be null.
  };
  using ConvKey = std::array<int, 9>;

  static size_t Bytes(int64_t n) { return static_cast<size_t>(n) * 4; }

  // Makes this backend's device current on the calling thread.
  absl::Status UseDevice() {
    int current = -1;
    DP_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != ordinal_) DP_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    return absl::OkStatus();
  }

  // The shared convolution workspace, grown to at least `bytes`.
  absl::StatusOr<void*> Workspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return workspace_;
    // Queued convolutions may still read the old buffer.
    DP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (workspace_ != nullptr) {
      DP_CUDA_RETURN_IF_ERROR(cudaFree(workspace_));
      workspace_ = nullptr;
      workspace_bytes_ = 0;
    }
    DP_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, bytes));
    workspace_bytes_ = bytes;
    return workspace_;
  }

  size_t WorkspaceLimit() const {
    return static_cast<size_t>(
        std::max<int64_t>(0, options_.workspace_limit_bytes));
  }

  absl::StatusOr<ConvPlan*> GetConvPlan(const ConvDesc& d) {
    const ConvKey key = {d.batch,    d.in_channels,  d.in_h,
                         d.in_w,     d.out_channels, d.kernel_h,
                         d.kernel_w, d.stride,       d.pad};
    auto it = conv_plans_.find(key);
    if (it != conv_plans_.end()) return it->second.get();
    auto plan = std::make_unique<ConvPlan>();
    DP_ASSIGN_OR_RETURN(plan->desc,
                        ConvDescriptors::Create(d, options_.allow_tf32));
    ConvPlan* raw = plan.get();
    conv_plans_.emplace(key, std::move(plan));
    return raw;
  }

  ConvAlgoRules Rules() const {
    ConvAlgoRules r;
    r.allow_transform = options_.allow_transform_conv_algorithms;
    r.allow_tf32 = options_.allow_tf32;
    r.deterministic = options_.deterministic_conv_algorithms;
    r.workspace_limit = WorkspaceLimit();
    return r;
  }

  std::function<void(const std::string&)> Logger() const {
    return [this](const std::string& m) {
      std::fprintf(stderr, "%s: %s\n", name_.c_str(), m.c_str());
    };
  }

  // Waits for the stream, then settles a pending loss: its bad-label error
  // or its outputs.
  absl::Status SyncStream() {
    DP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (!pending_.active) return absl::OkStatus();
    const PendingLoss p = pending_;
    pending_ = PendingLoss();
    const cuda_kernels::SoftmaxXentResult r = *host_result_;
    if (r.bad_row >= 0) {
      // Unlike the CPU backend, dlogits rows with valid labels were written.
      return absl::InvalidArgumentError(absl::StrCat(
          "SoftmaxCrossEntropy: label ", r.bad_label, " of example ", r.bad_row,
          " is not a class index in [0, ", p.classes, ")"));
    }
    if (p.host_loss != nullptr) {
      *p.host_loss = static_cast<float>(r.loss_sum / p.batch);
    }
    if (p.host_correct != nullptr) *p.host_correct = r.correct;
    return absl::OkStatus();
  }

  const int ordinal_;
  const CudaBackendOptions options_;
  std::string name_;

  cudaStream_t stream_ = nullptr;  // Owned.
  // CopyToHostAsync's stream and the events ordering it against stream_.
  cudaStream_t copy_stream_ = nullptr;  // Owned.
  cudaEvent_t computed_ = nullptr;      // Owned; recorded on stream_.
  cudaEvent_t copied_ = nullptr;        // Owned; recorded on copy_stream_.
  cublasHandle_t blas_ = nullptr;  // Owned; bound to stream_.
  cudnnHandle_t dnn_ = nullptr;    // Owned; bound to stream_.

  void* workspace_ = nullptr;  // Owned device memory; grow-only.
  size_t workspace_bytes_ = 0;

  cuda_kernels::SoftmaxXentResult* dev_result_ = nullptr;   // Device; owned.
  cuda_kernels::SoftmaxXentResult* host_result_ = nullptr;  // Pinned; owned.
  PendingLoss pending_;
  std::unique_ptr<HostAllocator> pinned_;  // Staging memory for callers.

  // Grow without bound in the number of distinct shapes, which is small in
  // training (the batch size, the last partial batch, the eval batch).
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans_;
  std::unique_ptr<CudaLayerOps> layer_ops_;  // Uses dnn_ and stream_.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(
    int device_ordinal, const CudaBackendOptions& options) {
  if (options.workspace_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewCudaBackend: negative workspace_limit_bytes ",
                     options.workspace_limit_bytes));
  }
  const CudaProbe probe = ProbeCuda();
  if (probe.device_count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("NewCudaBackend: no usable CUDA device: ", probe.reason));
  }
  if (device_ordinal < 0 || device_ordinal >= probe.device_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NewCudaBackend: device ordinal ", device_ordinal, " out of range (",
        probe.device_count, " CUDA device(s) visible)"));
  }
  auto backend = std::make_unique<CudaBackend>(device_ordinal, options);
  // cuBLAS and cuDNN are loaded now, when a CUDA backend is asked for.
  DP_RETURN_IF_ERROR(Annotate(
      LoadCudaLibraries(),
      absl::StrCat("NewCudaBackend(cuda:", device_ordinal, ")")));
  DP_RETURN_IF_ERROR(
      Annotate(backend->Init(),
               absl::StrCat("NewCudaBackend(cuda:", device_ordinal, ")")));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace downpour
