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
  explicit CudaPinnedHostAllocator(int device) : device_(device) {}

  void* Allocate(size_t bytes) override {
    if (!UseDevice()) return nullptr;
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
    (void)UseDevice();
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }
  const char* Name() const override { return "cuda-pinned"; }
  bool device_mapped() const override { return true; }

 private:
  // Makes device_ current on this thread (thread-local; cheap when it
  // already is), so that no call here creates a context on another GPU.
  bool UseDevice() const {
    if (device_ < 0) return true;
    if (cudaSetDevice(device_) == cudaSuccess) return true;
    (void)cudaGetLastError();
    return false;
  }

  const int device_;  // < 0: none recorded (no device current at creation).
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

std::unique_ptr<HostAllocator> NewCudaPinnedHostAllocator(
    int device_ordinal) {
  if (device_ordinal == kCudaCurrentDevice) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      current = -1;
    }
    device_ordinal = current;
  }
  return std::make_unique<CudaPinnedHostAllocator>(device_ordinal);
}

}  // namespace downpour
