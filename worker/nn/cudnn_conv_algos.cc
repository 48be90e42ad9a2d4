// File: worker/nn/cudnn_conv_algos.cc (see cudnn_conv_algos.h).
#include "worker/nn/cudnn_conv_algos.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "worker/nn/conv_algo_choice.h"
#include "worker/nn/cuda_status.h"

namespace downpour {
namespace {

bool IsTransformAlgo(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool IsTransformAlgo(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool IsTransformAlgo(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// Picks an algorithm from cuDNN's heuristic ranking by the rule of
// conv_algo_choice.h. `workspace_size(algo, &bytes)` wraps the matching
// cudnnGet*WorkspaceSize.
template <typename Algo, typename Perf, typename WorkspaceFn>
absl::StatusOr<ConvAlgoChoice> ChooseAlgo(const std::vector<Perf>& ranking,
                                          const std::vector<Algo>& fallbacks,
                                          ConvAlgoRules rules,
                                          const std::set<int>& bad,
                                          WorkspaceFn workspace_size) {
  rules.fallback_math_type = static_cast<int>(
      rules.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  std::vector<RankedAlgo> ranked;
  ranked.reserve(ranking.size());
  for (const Perf& p : ranking) {
    ranked.push_back(RankedAlgo{static_cast<int>(p.algo),
                                p.status == CUDNN_STATUS_SUCCESS,
                                p.determinism == CUDNN_DETERMINISTIC,
                                p.mathType == CUDNN_FMA_MATH,
                                static_cast<int>(p.mathType)});
  }
  std::vector<int> fallback_ids;
  for (Algo a : fallbacks) fallback_ids.push_back(static_cast<int>(a));
  return ChooseConvAlgo(
          ranked, fallback_ids, rules, bad,
          [](int a) { return IsTransformAlgo(static_cast<Algo>(a)); },
          [&](int a, size_t* bytes) {
            if (workspace_size(static_cast<Algo>(a), bytes) ==
                CUDNN_STATUS_SUCCESS) {
              return true;
            }
            // Consume cuDNN's message for this expected failure so that a
            // later CudnnError does not attach it to an unrelated error.
            char ignored[256];
            cudnnGetLastErrorString(ignored, sizeof(ignored));
            return false;
          });
}

}  // namespace

absl::StatusOr<ConvAlgoChoice> ChooseForwardAlgo(cudnnHandle_t handle,
    const ConvDescriptors& cd, const ConvAlgoRules& rules,
    const std::set<int>& bad) {
  int max_count = 0;
  DP_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> ranking(std::max(1, max_count));
  int returned = 0;
  DP_ASSIGN_OR_RETURN(cudnnConvolutionDescriptor_t conv,
                      cd.WithMathType(cd.ranking_math_type()));
  DP_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
      handle, cd.x(), cd.w(), conv, cd.y(),
      static_cast<int>(ranking.size()), &returned, ranking.data()));
  ranking.resize(std::max(0, returned));
  const std::vector<cudnnConvolutionFwdAlgo_t> fallbacks = {
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      CUDNN_CONVOLUTION_FWD_ALGO_GEMM};
  return ChooseAlgo(ranking, fallbacks, rules, bad,
                    [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
                      return cudnnGetConvolutionForwardWorkspaceSize(
                          handle, cd.x(), cd.w(), conv, cd.y(), a, bytes);
                    });
}

absl::StatusOr<ConvAlgoChoice> ChooseBackwardDataAlgo(
    cudnnHandle_t handle, const ConvDescriptors& cd, const ConvAlgoRules& rules,
    const std::set<int>& bad) {
  int max_count = 0;
  DP_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranking(
      std::max(1, max_count));
  int returned = 0;
  DP_ASSIGN_OR_RETURN(cudnnConvolutionDescriptor_t conv,
                      cd.WithMathType(cd.ranking_math_type()));
  DP_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      handle, cd.w(), cd.y(), conv, cd.x(),
      static_cast<int>(ranking.size()), &returned, ranking.data()));
  ranking.resize(std::max(0, returned));
  const std::vector<cudnnConvolutionBwdDataAlgo_t> fallbacks = {
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
  return ChooseAlgo(ranking, fallbacks, rules, bad,
                    [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
                      return cudnnGetConvolutionBackwardDataWorkspaceSize(
                          handle, cd.w(), cd.y(), conv, cd.x(), a, bytes);
                    });
}

absl::StatusOr<ConvAlgoChoice> ChooseBackwardFilterAlgo(
    cudnnHandle_t handle, const ConvDescriptors& cd, const ConvAlgoRules& rules,
    const std::set<int>& bad) {
  int max_count = 0;
  DP_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranking(
      std::max(1, max_count));
  int returned = 0;
  DP_ASSIGN_OR_RETURN(cudnnConvolutionDescriptor_t conv,
                      cd.WithMathType(cd.ranking_math_type()));
  DP_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      handle, cd.x(), cd.y(), conv, cd.w(),
      static_cast<int>(ranking.size()), &returned, ranking.data()));
  ranking.resize(std::max(0, returned));
  const std::vector<cudnnConvolutionBwdFilterAlgo_t> fallbacks = {
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3};
  return ChooseAlgo(ranking, fallbacks, rules, bad,
                    [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
                      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                          handle, cd.x(), cd.y(), conv, cd.w(), a, bytes);
                    });
}

}  // namespace downpour
