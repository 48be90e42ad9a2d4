// File: worker/nn/cuda_libs.cc (see cuda_libs.h).
#include "worker/nn/cuda_libs.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace downpour {
namespace {

struct Loaded {
  absl::Status status = absl::FailedPreconditionError("not loaded");
  void* cublas = nullptr;  // dlopen handles; never closed (process lifetime).
  void* cudnn = nullptr;
};

// Filled once by LoadOnce; read-only afterwards.
Loaded& State() {
  static Loaded* const state = new Loaded();
  return *state;
}
std::once_flag g_once;

std::string LoadedPath(void* handle) {
  struct link_map* map = nullptr;
  if (handle != nullptr && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 &&
      map != nullptr && map->l_name != nullptr) {
    return map->l_name;
  }
  return "?";
}

void LoadOnce() {
  Loaded& s = State();
  const std::vector<std::string> dirs = {"/usr/local/cuda/lib64"};
  std::vector<std::string> errors;
  absl::StatusOr<void*> cublas =
      OpenCudaLibrary(CudaLibSoname(CudaLib::kCublas), dirs);
  if (cublas.ok()) s.cublas = *cublas;
  else errors.push_back(std::string(cublas.status().message()));
  absl::StatusOr<void*> cudnn =
      OpenCudaLibrary(CudaLibSoname(CudaLib::kCudnn), dirs);
  if (cudnn.ok()) s.cudnn = *cudnn;
  else errors.push_back(std::string(cudnn.status().message()));
  if (errors.empty()) {
    s.status = absl::OkStatus();
    return;
  }
  s.status = absl::FailedPreconditionError(absl::StrCat(
      "the CUDA backend needs cuBLAS ", CUBLAS_VER_MAJOR, " and cuDNN ",
      CUDNN_MAJOR, " for CUDA ", CUDART_VERSION / 1000, ": ",
      absl::StrJoin(errors, "; "),
      ". Put their folder on DOWNPOUR_CUDA_LIB_DIRS (bundle) or "
      "LD_LIBRARY_PATH, e.g. /usr/local/cuda/lib64 or PyTorch's "
      "site-packages/nvidia/cudnn/lib and nvidia/cu13/lib"));
}

}  // namespace

// Whole sonames as string literals: deploy/make_bundle.sh finds them in the
// binary (strings) to know which libraries a program may dlopen.
#define DP_CUDA_LIBS_STR2(x) #x
#define DP_CUDA_LIBS_STR(x) DP_CUDA_LIBS_STR2(x)
constexpr char kCublasSoname[] = "libcublas.so." DP_CUDA_LIBS_STR(CUBLAS_VER_MAJOR);
constexpr char kCudnnSoname[] = "libcudnn.so." DP_CUDA_LIBS_STR(CUDNN_MAJOR);

const char* CudaLibSoname(CudaLib lib) {
  return lib == CudaLib::kCublas ? kCublasSoname : kCudnnSoname;
}

absl::StatusOr<void*> OpenCudaLibrary(const char* soname,
                                      const std::vector<std::string>& dirs) {
  std::vector<std::string> tried;
  // The pointer goes to dlopen as is, so the literal stays whole in the
  // binary (make_bundle.sh looks for it).
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) return h;
  const char* e = dlerror();
  tried.push_back(absl::StrCat("the library path: ", e ? e : "not found"));
  for (const std::string& d : dirs) {
    const std::string path = absl::StrCat(d, "/", soname);
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) return h;
    e = dlerror();
    tried.push_back(absl::StrCat(d, ": ", e ? e : "not found"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load ", soname, " (tried ",
                   absl::StrJoin(tried, "; "), ")"));
}

absl::Status LoadCudaLibraries() {
  std::call_once(g_once, LoadOnce);
  return State().status;
}

std::string CudaLibrariesDescription() {
  const Loaded& s = State();
  if (!s.status.ok()) return "not loaded";
  return absl::StrCat(CudaLibSoname(CudaLib::kCublas), " from ",
                      LoadedPath(s.cublas), ", ",
                      CudaLibSoname(CudaLib::kCudnn), " from ",
                      LoadedPath(s.cudnn));
}

namespace cuda_libs_internal {

void* Symbol(CudaLib lib, const char* name) {
  if (!LoadCudaLibraries().ok()) return nullptr;
  void* handle = lib == CudaLib::kCublas ? State().cublas : State().cudnn;
  return dlsym(handle, name);
}

template <>
cudnnStatus_t NotLoaded<cudnnStatus_t>() {
  return CUDNN_STATUS_NOT_INITIALIZED;
}
template <>
cublasStatus_t NotLoaded<cublasStatus_t>() {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}
template <>
size_t NotLoaded<size_t>() {
  return 0;
}
template <>
const char* NotLoaded<const char*>() {
  return "(cuBLAS/cuDNN not loaded; see LoadCudaLibraries)";
}
template <>
void NotLoaded<void>() {}

}  // namespace cuda_libs_internal
}  // namespace downpour

// The forwarding definitions of the cuBLAS/cuDNN functions used.
#include "worker/nn/cuda_stubs.inc"
