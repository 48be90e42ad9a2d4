// File: worker/nn/cuda_versions.cc (see cuda_versions.h).
#include "worker/nn/cuda_versions.h"

#include "absl/strings/str_cat.h"

namespace downpour {

std::string CudnnVersionString(size_t v) {
  return absl::StrCat(v / 10000, ".", v % 10000 / 100, ".", v % 100);
}

std::string CudaVersionString(size_t v) {
  return absl::StrCat(v / 1000, ".", v % 1000 / 10);
}

absl::Status CheckCudnnVersions(size_t compiled_cudnn, size_t loaded_cudnn,
                                size_t cudnn_cudart, int cuda_runtime) {
  if (loaded_cudnn / 10000 != compiled_cudnn / 10000) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the loaded cuDNN is ", CudnnVersionString(loaded_cudnn),
        " but this program was built against cuDNN ",
        CudnnVersionString(compiled_cudnn),
        " (major versions differ); put a cuDNN ", compiled_cudnn / 10000,
        ".x first on the library path (DOWNPOUR_CUDA_LIB_DIRS)"));
  }
  if (loaded_cudnn / 100 < compiled_cudnn / 100) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the loaded cuDNN is ", CudnnVersionString(loaded_cudnn),
        ", older than the cuDNN ", CudnnVersionString(compiled_cudnn),
        " this program was built against (cuDNN is compatible only with a "
        "library of the same major and at least the same minor version); "
        "put a cuDNN ", compiled_cudnn / 10000, ".",
        compiled_cudnn % 10000 / 100,
        " or newer first on the library path (DOWNPOUR_CUDA_LIB_DIRS)"));
  }
  if (cuda_runtime <= 0 ||
      cudnn_cudart / 1000 != static_cast<size_t>(cuda_runtime) / 1000) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the loaded cuDNN ", CudnnVersionString(loaded_cudnn),
        " was built for CUDA ", CudaVersionString(cudnn_cudart),
        " but the CUDA runtime is ",
        cuda_runtime <= 0 ? std::string("unknown")
                          : CudaVersionString(cuda_runtime),
        " (major versions differ); install the cuDNN build for CUDA ",
        cuda_runtime / 1000, " (e.g. the nvidia-cudnn-cu", cuda_runtime / 1000,
        " wheel) and put it first on the library path"));
  }
  return absl::OkStatus();
}

}  // namespace downpour
