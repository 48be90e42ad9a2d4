// OpenCudaBenchDevice on //worker/nn:cuda_backend.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/bench_device.h"
#include "worker/nn/cuda_backend.h"

namespace downpour {

absl::StatusOr<BenchDevice> OpenCudaBenchDevice(const CudaBenchOptions& options) {
  const CudaProbe probe = ProbeCuda();
  if (probe.device_count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: ",
        probe.reason.empty() ? "the CUDA runtime reports 0 devices"
                             : probe.reason));
  }
  if (options.device_ordinal < 0 ||
      options.device_ordinal >= probe.device_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpu=", options.device_ordinal, " but this host has ",
        probe.device_count, " CUDA device(s)"));
  }
  CudaBackendOptions backend_options;
  if (options.workspace_limit_bytes >= 0) {
    backend_options.workspace_limit_bytes = options.workspace_limit_bytes;
  }
  backend_options.allow_tf32 = options.allow_tf32;
  backend_options.blocking_sync = options.blocking_sync;
  BenchDevice d;
  DP_ASSIGN_OR_RETURN(d.backend,
                      NewCudaBackend(options.device_ordinal, backend_options));
  d.owned_allocator = NewCudaPinnedHostAllocator();
  d.host_allocator = d.owned_allocator.get();
  // Pinned allocation never falls back to pageable memory; find out now
  // rather than in the middle of a measurement.
  void* probe_block = d.host_allocator->Allocate(1 << 20);
  if (probe_block == nullptr) {
    return absl::ResourceExhaustedError(
        "cudaHostAlloc of 1 MiB of pinned host memory failed");
  }
  d.host_allocator->Free(probe_block);
  return d;
}

}  // namespace downpour
