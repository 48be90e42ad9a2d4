// File: worker/nn/backend_select.h
//
// Picks and opens the compute backends of one worker process from its
// --device / --gpus / --replicas request: the CUDA backend on the listed
// GPUs, or the CPU backend. Called from main (the device is chosen there and
// passed down, never inside library code).
//
// --device=auto uses CUDA when a GPU is visible AND the CUDA backend starts.
// Without a usable GPU it uses the CPU backend and says so in one plain line
// ("no GPU found: training on the CPU (oneDNN)"); when a visible GPU's
// backend fails to start (exclusive-process mode, out of memory, cuBLAS or
// cuDNN missing, a cuDNN for another CUDA) the reason is logged and the CPU
// backend is used. --device=cuda (or --gpus) without a usable GPU, and
// --device=cuda when the backend fails, are errors whose message carries the
// CUDA runtime's reason.
//
// Usage:
//   BackendRequest req;  req.device = DeviceKind::kAuto;  req.cpu_replicas = 2;
//   DP_ASSIGN_OR_RETURN(SelectedBackends sel,
//                       SelectBackends(req, RealCudaFactory()));
//   std::printf("worker 0: %s\n", sel.note.c_str());
//
// The CudaFactory seam lets a test play a visible GPU whose backend fails,
// which a machine without a GPU cannot produce for real.
#ifndef DOWNPOUR_WORKER_NN_BACKEND_SELECT_H_
#define DOWNPOUR_WORKER_NN_BACKEND_SELECT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "worker/nn/backend.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/device_kind.h"

namespace downpour {

struct BackendRequest {
  DeviceKind device = DeviceKind::kAuto;
  std::vector<int> gpus;        // One replica per entry; empty: GPU 0.
  int cpu_replicas = 1;         // Replicas on the CPU backend.
  bool single = false;          // One replica whatever the above (eval).
  int cpu_threads = 1;
  CpuBackendKind cpu_backend = CpuBackendKind::kOnednn;
  CudaBackendOptions cuda;
};

// How CUDA is probed and opened; RealCudaFactory() uses cuda_backend.h.
struct CudaFactory {
  std::function<CudaProbe()> probe;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(
      int ordinal, const CudaBackendOptions& options)>
      open;
  // The pinned allocator for replicas whose first GPU is `ordinal`.
  std::function<std::unique_ptr<HostAllocator>(int ordinal)> pinned;
};
CudaFactory RealCudaFactory();

struct SelectedBackends {
  std::vector<std::unique_ptr<Backend>> backends;  // One per replica.
  std::unique_ptr<HostAllocator> pinned;  // Null on the CPU.
  bool cuda = false;
  // What was chosen and why, one line for the log: e.g. "no GPU found:
  // training on the CPU (oneDNN)", or a visible GPU's start-up failure.
  std::string note;
  // With --device=auto and no usable GPU: the CUDA runtime's reason (e.g.
  // "cudaGetDeviceCount failed: cudaErrorInsufficientDriver (...)"), for a
  // verbose log; empty otherwise.
  std::string detail;
};

// The CPU backend `kind` with `threads` threads.
absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(CpuBackendKind kind,
                                                       int threads);

// Errors: InvalidArgument for a bad request (--gpus with --device=cpu) or a
// GPU ordinal beyond the visible ones; FailedPrecondition for
// --device=cuda/--gpus without a GPU (naming the CUDA runtime's reason); the
// backend's error for --device=cuda when it fails to start.
absl::StatusOr<SelectedBackends> SelectBackends(const BackendRequest& request,
                                                const CudaFactory& factory);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_BACKEND_SELECT_H_
