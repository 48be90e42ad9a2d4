// File: worker/nn/cuda_versions.h
//
// Whether the cuDNN library that was loaded at run time fits the CUDA
// runtime and the cuDNN headers this program was built with, as a pure
// function of the version numbers (unit-tested on any machine; the CUDA
// backend feeds it cudnnGetVersion(), cudnnGetCudartVersion() and
// cudaRuntimeGetVersion()).
//
// Rules: cuDNN's major version must equal the compiled one (the C API
// changes between majors) and its minor version must be at least the
// compiled one (cuDNN promises compatibility within a major only with a
// library at least as new as the headers: a program built against 9.19 may
// call what 9.10 lacks); and the CUDA major version the loaded cuDNN was
// built for must equal the CUDA runtime's (a cuDNN for CUDA 12 next to a
// CUDA 13 runtime fails inside its kernels, or loads a second runtime).
//
// Usage:
//   DP_RETURN_IF_ERROR(CheckCudnnVersions(CUDNN_VERSION, cudnnGetVersion(),
//                                         cudnnGetCudartVersion(), runtime));
#ifndef DOWNPOUR_WORKER_NN_CUDA_VERSIONS_H_
#define DOWNPOUR_WORKER_NN_CUDA_VERSIONS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace downpour {

// "9.19.0" from cuDNN's encoding major * 10000 + minor * 100 + patch.
std::string CudnnVersionString(size_t cudnn_version);
// "13.0" from the CUDA encoding major * 1000 + minor * 10.
std::string CudaVersionString(size_t cuda_version);

// FailedPrecondition naming both versions (and what to install) when a
// rule above is broken; OK otherwise.
absl::Status CheckCudnnVersions(size_t compiled_cudnn, size_t loaded_cudnn,
                                size_t cudnn_cudart, int cuda_runtime);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDA_VERSIONS_H_
