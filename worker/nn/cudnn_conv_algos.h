// File: worker/nn/cudnn_conv_algos.h
//
// Picks the cuDNN forward, backward-data and backward-filter algorithms for
// one convolution shape: asks cuDNN's v7 heuristics for their ranking
// (cudnnGetConvolution*Algorithm_v7), then applies the pure rule of
// conv_algo_choice.h, with the matching cudnnGet*WorkspaceSize query as the
// workspace callback and fixed GEMM-family fallbacks. The CUDA backend
// (cuda_backend.cc) calls these once per shape and caches the result.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(CudnnAlgoChoice<cudnnConvolutionFwdAlgo_t> fwd,
//       ChooseForwardAlgo(handle, *descriptors, /*allow_transform=*/false,
//                         workspace_limit_bytes));
//   cudnnConvolutionForward(..., fwd.algo, workspace, fwd.workspace, ...);
//
// The ranking entries' mathType is ignored on purpose: it says which math an
// algorithm would use at best, while the convolution descriptor, set to
// CUDNN_FMA_MATH (cudnn_descriptors.h), restricts the kernels that actually
// run (PyTorch does the same when TF32 is disallowed). An algorithm without
// an FMA kernel for the shape fails its workspace query and is skipped.
//
// Errors: the failing cuDNN query's status (cuda_status.h), or Unimplemented
// when no algorithm is usable within the workspace limit.
//
// Ownership and thread-safety: nothing is kept; `handle` and the
// descriptors are borrowed for the call. The handle must not be used by
// another thread during the call (cuDNN handles are not thread-safe).
#ifndef DOWNPOUR_WORKER_NN_CUDNN_CONV_ALGOS_H_
#define DOWNPOUR_WORKER_NN_CUDNN_CONV_ALGOS_H_

#include <cudnn.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "worker/nn/cudnn_descriptors.h"

namespace downpour {

// A chosen algorithm and the workspace bytes it needs for its shape.
template <typename Algo>
struct CudnnAlgoChoice {
  Algo algo{};
  size_t workspace = 0;
};

// `allow_transform`: also consider FFT and Winograd algorithms (they round
// differently from a direct sum of products). `workspace_limit`: bytes.
absl::StatusOr<CudnnAlgoChoice<cudnnConvolutionFwdAlgo_t>> ChooseForwardAlgo(
    cudnnHandle_t handle, const ConvDescriptors& cd, bool allow_transform,
    size_t workspace_limit);
absl::StatusOr<CudnnAlgoChoice<cudnnConvolutionBwdDataAlgo_t>>
ChooseBackwardDataAlgo(cudnnHandle_t handle, const ConvDescriptors& cd,
                       bool allow_transform, size_t workspace_limit);
absl::StatusOr<CudnnAlgoChoice<cudnnConvolutionBwdFilterAlgo_t>>
ChooseBackwardFilterAlgo(cudnnHandle_t handle, const ConvDescriptors& cd,
                         bool allow_transform, size_t workspace_limit);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDNN_CONV_ALGOS_H_
