#include "tests/bench/bench_device.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/nn/onednn_backend.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

absl::StatusOr<BenchDevice> OpenCpu(const BenchDeviceOptions& o) {
  BenchDevice d;
  if (o.cpu_backend == CpuBackendKind::kOnednn) {
    OnednnOptions onednn;
    onednn.threads = o.cpu_threads;
    onednn.winograd = o.onednn_winograd;
    DP_ASSIGN_OR_RETURN(d.backend, NewOnednnBackend(onednn));
  } else {
    d.backend = NewOpenblasBackend(o.cpu_threads);
  }
  d.host_allocator = DefaultHostAllocator();
  return d;
}

// The CUDA backend on GPU o.gpu of the probe's devices, with pinned host
// buffers.
absl::StatusOr<BenchDevice> OpenCuda(const BenchDeviceOptions& o,
                                     const CudaProbe& probe) {
  if (o.gpu < 0 || o.gpu >= probe.device_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpu=", o.gpu, " but this host has ", probe.device_count,
        " CUDA device(s)"));
  }
  BenchDevice d;
  d.cuda = true;
  DP_ASSIGN_OR_RETURN(d.backend, NewCudaBackend(o.gpu, o.cuda));
  d.owned_allocator = NewCudaPinnedHostAllocator();
  d.host_allocator = d.owned_allocator.get();
  // Pinned allocation never falls back to pageable memory; find out now
  // rather than in the middle of a measurement.
  void* block = d.host_allocator->Allocate(1 << 20);
  if (block == nullptr) {
    return absl::ResourceExhaustedError(
        "cudaHostAlloc of 1 MiB of pinned host memory failed");
  }
  d.host_allocator->Free(block);
  return d;
}

}  // namespace

absl::StatusOr<BenchDevice> OpenBenchDevice(const BenchDeviceOptions& o) {
  if (o.device == DeviceKind::kCpu) return OpenCpu(o);
  const CudaProbe probe = ProbeCuda();
  if (probe.device_count == 0) {
    const std::string reason = probe.reason.empty()
                                   ? "the CUDA runtime reports 0 devices"
                                   : probe.reason;
    if (o.device == DeviceKind::kCuda) {
      return absl::FailedPreconditionError(
          absl::StrCat("no usable CUDA device: ", reason));
    }
    DP_ASSIGN_OR_RETURN(BenchDevice d, OpenCpu(o));
    d.note = absl::StrCat("--device=auto: no GPU found (", reason,
                          "): measuring the CPU backend (",
                          CpuLibraryName(o.cpu_backend), ")");
    return d;
  }
  absl::StatusOr<BenchDevice> cuda = OpenCuda(o, probe);
  if (cuda.ok() || o.device == DeviceKind::kCuda) return cuda;
  DP_ASSIGN_OR_RETURN(BenchDevice d, OpenCpu(o));
  d.note = absl::StrCat("--device=auto: a GPU is visible (",
                        absl::StrJoin(probe.names, ", "),
                        ") but the CUDA backend failed to start: ",
                        cuda.status().message(),
                        "; measuring the CPU backend (",
                        CpuLibraryName(o.cpu_backend), ")");
  return d;
}

}  // namespace downpour
