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
//   ConvAlgoRules rules;  rules.workspace_limit = limit;
//   DP_ASSIGN_OR_RETURN(ConvAlgoChoice fwd,
//       ChooseForwardAlgo(handle, *descriptors, rules, /*bad=*/{}));
//   cudnnConvolutionForward(..., static_cast<cudnnConvolutionFwdAlgo_t>(
//       fwd.algo), workspace, fwd.workspace, ...);
//
// Math types: without TF32 only ranking entries whose mathType is
// CUDNN_FMA_MATH are considered; the convolution descriptor is set to
// CUDNN_FMA_MATH too (cudnn_descriptors.h), so the kernels that run are FMA
// kernels (PyTorch's rule when TF32 is disallowed). With TF32 the descriptor
// is CUDNN_DEFAULT_MATH and entries of every math type count. The rankings
// and workspace queries run with the descriptor set to
// ConvDescriptors::ranking_math_type() (a run before may have changed it);
// the caller runs the chosen algorithm with
// ConvDescriptors::WithMathType(choice.math_type), as PyTorch does.
// An algorithm whose workspace query fails is skipped; `bad` algorithms
// (they failed to run) are never chosen.
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
#include <set>

#include "absl/status/statusor.h"
#include "worker/nn/conv_algo_choice.h"
#include "worker/nn/cudnn_descriptors.h"

namespace downpour {

// `rules.fallback_math_type` is set here; the other fields are the caller's.
absl::StatusOr<ConvAlgoChoice> ChooseForwardAlgo(cudnnHandle_t handle,
                                                 const ConvDescriptors& cd,
                                                 const ConvAlgoRules& rules,
                                                 const std::set<int>& bad);
absl::StatusOr<ConvAlgoChoice> ChooseBackwardDataAlgo(
    cudnnHandle_t handle, const ConvDescriptors& cd, const ConvAlgoRules& rules,
    const std::set<int>& bad);
absl::StatusOr<ConvAlgoChoice> ChooseBackwardFilterAlgo(
    cudnnHandle_t handle, const ConvDescriptors& cd, const ConvAlgoRules& rules,
    const std::set<int>& bad);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDNN_CONV_ALGOS_H_
