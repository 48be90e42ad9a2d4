// File: worker/nn/cuda_probe.cc
//
// The parts of cuda_backend.h that need only the CUDA runtime (linked
// statically), no cuBLAS or cuDNN: ProbeCuda and the pinned host allocator.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "worker/nn/cuda_backend.h"

namespace downpour {
namespace {

// cudaHostAlloc-backed staging memory (see cuda_backend.h).
class CudaPinnedHostAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* p = nullptr;
    // Page-aligned, so the 64-byte alignment HostAllocator promises holds.
    const cudaError_t e =
        cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }
  const char* Name() const override { return "cuda-pinned"; }
};

}  // namespace

CudaProbe ProbeCuda() {
  CudaProbe probe;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    probe.reason =
        absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorName(e), " (",
                     cudaGetErrorString(e), ")");
    return probe;
  }
  if (count <= 0) {
    probe.reason = "cudaGetDeviceCount found no CUDA devices";
    return probe;
  }
  probe.device_count = count;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t pe = cudaGetDeviceProperties(&prop, i);
    if (pe == cudaSuccess) {
      probe.names.push_back(prop.name);
    } else {
      (void)cudaGetLastError();
      probe.names.push_back(
          absl::StrCat("(unknown: ", cudaGetErrorName(pe), ")"));
    }
  }
  return probe;
}

std::unique_ptr<HostAllocator> NewCudaPinnedHostAllocator() {
  return std::make_unique<CudaPinnedHostAllocator>();
}

}  // namespace downpour
