// File: worker/nn/cuda_backend.h
//
// The CUDA implementation of Backend (backend.h): cuDNN for convolutions,
// pooling forward and batch normalization, cuBLAS for GEMM and AXPY, small
// custom kernels for the rest (cuda_kernels.h). Also a page-locked HostAllocator for staging
// buffers, and ProbeCuda() to ask whether a usable GPU exists at all.
//
// Usage (in main; library code never picks a device):
//   CudaProbe probe = ProbeCuda();
//   if (probe.device_count == 0) { /* use a CPU backend, log probe.reason */ }
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> gpu,
//                       NewCudaBackend(/*device_ordinal=*/0,
//                       CudaBackendOptions()));
//   std::unique_ptr<HostAllocator> pinned = NewCudaPinnedHostAllocator(0);
//
// A binary that links this runs fine on a machine without a GPU or driver:
// ProbeCuda() then reports device_count 0 with the reason, and
// NewCudaBackend returns an error status.
//
// Numerics: convolutions and GEMMs run in plain fp32 (no TF32 tensor-core
// math, no FFT/Winograd convolution algorithms unless allowed by options), so
// results match the CPU backend to float rounding (the tests use relative
// error <= 1e-4).
//
// Verification:
//  * Without a GPU: compiles with g++ 12 against CUDA 13.0 / cuDNN 9.19 /
//    cuBLAS 13 headers, the kernels compile with nvcc for sm_80, sm_90 and
//    compute_90 PTX (58 registers for the 512-thread softmax kernel, under
//    its __launch_bounds__), everything links, and on a machine without a
//    driver ProbeCuda() reports device_count 0 with the cudaGetDeviceCount
//    error, NewCudaBackend returns FailedPrecondition and the pinned
//    allocator returns nullptr (cuda_backend_test's NoGpu tests); every GPU
//    test skips. cuDNN descriptors need no device: libcudnn 9.19 accepts the
//    tensor, filter, convolution (with CUDNN_FMA_MATH) and pooling
//    descriptors that cudnn_descriptors.cc builds, and
//    cudnnGetConvolution2dForwardOutputDim /
//    cudnnGetPooling2dForwardOutputDim give ConvDesc/PoolDesc's output sizes
//    for the test shapes (pooling drops trailing rows/columns). The GPU
//    tests' own logic runs on the CPU backends: backend_conformance_test
//    instantiates the same suite for OpenBLAS, oneDNN and CUDA.
//  * Needing a GPU run of backend_conformance_test, cuda_backend_test and
//    cuda_train_test: every numerical result and kernel launch; that the v7
//    heuristics (cudnnGetConvolution*Algorithm_v7) offer usable
//    non-FFT/non-Winograd algorithms whose FMA-math workspace queries
//    succeed for every shape (if none does, the fixed fallbacks are tried,
//    else the call fails with Unimplemented); cudnnAddTensor's (1, O, 1, 1)
//    bias broadcast; performance.
//
// Design:
//  * One non-blocking stream per backend; cuBLAS and cuDNN handles are bound
//    to it and every operation is queued on it. Only CopyToHost, Synchronize,
//    SoftmaxCrossEntropy, Free and workspace growth wait for the stream.
//  * A second non-blocking stream carries CopyToHostAsync's copies (a
//    layer's gradients while the earlier layers' backward runs): each copy
//    waits for an event recorded on the compute stream when it was queued,
//    and OrderAfterHostCopies makes the compute stream wait for an event
//    recorded on the copy stream. WaitHostCopies synchronizes the copy
//    stream only.
//  * Convolutions: per shape (the full ConvDesc) a plan holds the cuDNN
//    descriptors and, chosen once on first use, the forward, backward-data
//    and backward-filter algorithms. One workspace buffer serves all of them
//    and only grows (up to CudaBackendOptions::workspace_limit_bytes).
//  * Numerics (results within float rounding of the CPU backend): cuBLAS runs
//    in CUBLAS_DEFAULT_MATH, where sgemm keeps fp32 inputs (TF32 would need
//    CUBLAS_TF32_TENSOR_OP_MATH). cuDNN convolutions use CUDNN_FMA_MATH:
//    CUDNN_DEFAULT_MATH still permits TF32 tensor cores for fp32 data on
//    Ampere and newer (H100 included), which costs ~3 decimal digits. FFT and
//    Winograd algorithms are excluded unless the options allow them.
//  * Pooling backward and ReLU are custom kernels rather than cuDNN, so the
//    tie rules are exactly the CPU backend's: the gradient goes to a window's
//    first maximum, and ReLU passes the gradient only where y > 0. Pooling,
//    batch norm and the small ops live in cuda_layer_ops.h.
//    Softmax cross-entropy is one fused kernel; its loss and count are
//    reduced on the device and read back through a small pinned buffer.
//    Bias gradients (dense and convolution) are our own fixed-order
//    reductions: cudnnConvolutionBackwardBias was many times slower.
//  * Algorithm choice follows cuDNN's ranking, non-deterministic algorithms
//    (backward-filter ALGO_0) included, unless
//    deterministic_conv_algorithms asks for deterministic ones first.
//  * Errors from every CUDA, cuDNN and cuBLAS call become absl::Status
//    values naming the call; nothing aborts.
//
// Contract details beyond backend.h:
//  * Work is queued on the backend's own CUDA stream. CopyToHost and
//    Synchronize wait for it; SoftmaxCrossEntropy waits too (its host
//    outputs need the result), SoftmaxCrossEntropyDeferred does not: its
//    result is copied into pinned memory and settled by the next
//    Synchronize or CopyToHost. staging_allocator() is pinned memory.
//  * cuBLAS and cuDNN are loaded (cuda_libs.h) by the first NewCudaBackend;
//    a missing library is a FailedPrecondition naming it. The loaded
//    cuDNN must be at least the compiled version within its major, and its
//    CUDA version must match the runtime's major (cuda_versions.h).
//  * CopyToDevice from pageable memory returns once the source has been
//    read. From page-locked memory (e.g. NewCudaPinnedHostAllocator) it
//    returns at once: the source must stay unchanged until the next
//    Synchronize, CopyToHost or SoftmaxCrossEntropy call.
//  * Free waits for the stream before releasing memory.
//  * SoftmaxCrossEntropy with a label that is not a class index returns
//    InvalidArgument, as on the CPU, but may already have written the
//    dlogits rows whose labels are valid.
//  * Thread-safety: as backend.h says, one thread at a time. Each public call
//    makes the backend's device current on the calling thread first (cheap
//    when it already is), so the owning thread may also use other devices.
#ifndef DOWNPOUR_WORKER_NN_CUDA_BACKEND_H_
#define DOWNPOUR_WORKER_NN_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "worker/nn/backend.h"

namespace downpour {

// What the CUDA runtime sees on this machine.
struct CudaProbe {
  int device_count = 0;
  // Why no device is usable when device_count == 0 (e.g. the
  // cudaGetDeviceCount error "CUDA driver version is insufficient for CUDA
  // runtime version"); empty otherwise.
  std::string reason;
  // Device names by ordinal, e.g. "NVIDIA H100 80GB HBM3".
  std::vector<std::string> names;
};

// Never fails hard: without a driver or GPU it returns device_count 0.
CudaProbe ProbeCuda();

struct CudaBackendOptions {
  // Upper bound on the cuDNN convolution workspace (one buffer shared by all
  // convolutions). Algorithms needing more are not chosen.
  int64_t workspace_limit_bytes = int64_t{256} << 20;
  // Also consider FFT and Winograd convolution algorithms. They transform the
  // operands and round differently from a direct sum of products (errors
  // grow with tile size), so by default only the GEMM-family and direct
  // algorithms are used, which keeps results within float rounding of the
  // CPU backend.
  bool allow_transform_conv_algorithms = false;
  // TF32 tensor-core math for GEMMs (CUBLAS_TF32_TENSOR_OP_MATH) and
  // convolutions (CUDNN_DEFAULT_MATH, rankings of every math type): faster
  // on Ampere and newer, about 3 fewer decimal digits. Off by default.
  bool allow_tf32 = false;
  // Deterministic convolution algorithms first (cuDNN's ranking otherwise):
  // gradients that repeat bit for bit wherever a deterministic algorithm
  // fits the workspace limit (else the ranking's next one runs), at a cost (backward-filter ALGO_1
  // instead of ALGO_0, which sums with atomics, is several times slower;
  // docs/results.md has the H200 figures). Off by default: asynchronous
  // training is not repeatable anyway, and results stay within float
  // rounding either way.
  bool deterministic_conv_algorithms = false;
  // cudaDeviceScheduleBlockingSync: a synchronizing thread sleeps instead of
  // spinning a core (the input threads and gRPC need the cores); costs some
  // wake-up latency per synchronization. The flag belongs to the device's
  // primary context, which every backend and thread of the process on that
  // device shares: with CUDA 12+ (cudaSetDevice creates the context)
  // cudaSetDeviceFlags overwrites its flags at any time, so one backend
  // created with blocking_sync makes the device's synchronizations block
  // for all of them from then on; a backend without it leaves them as
  // they are.
  bool blocking_sync = false;
};

// A backend on CUDA device `device_ordinal`, with its own stream, cuBLAS and
// cuDNN handles. Name() is e.g. "cuda:0 (NVIDIA H100 80GB HBM3)".
// Errors: FailedPrecondition when no usable device exists (the message
// includes ProbeCuda's reason), InvalidArgument for an ordinal out of range,
// and the failing call's error for anything else during set-up.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(
    int device_ordinal, const CudaBackendOptions& options);

// Page-locked host memory from cudaHostAlloc (portable across devices),
// released with cudaFreeHost. Allocate and Free first make `device_ordinal`
// current on the calling thread (cudaSetDevice): on a thread that never set
// a device (a batcher's), the runtime would otherwise create a context on
// GPU 0, even for a worker given --gpus=1,2. kCudaCurrentDevice: the device
// current on the thread that calls this function. Allocate returns nullptr
// on failure (including on machines without a GPU); it never falls back to
// pageable memory. Thread-safe. Name() is "cuda-pinned".
inline constexpr int kCudaCurrentDevice = -1;
std::unique_ptr<HostAllocator> NewCudaPinnedHostAllocator(
    int device_ordinal = kCudaCurrentDevice);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDA_BACKEND_H_
