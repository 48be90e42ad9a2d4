#include "worker/backend_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "common/flag_args.h"

ABSL_FLAG(downpour::DeviceKind, device, downpour::BackendFlags{}.device,
          "auto, cpu or cuda. auto: CUDA when a GPU is usable, else the CPU "
          "(the log says which). cuda refuses to run without a GPU.");
ABSL_FLAG(int, cpu_threads, downpour::BackendFlags{}.cpu_threads,
          "Threads of the CPU backend (>= 1).");
ABSL_FLAG(downpour::CpuBackendKind, cpu_backend,
          downpour::BackendFlags{}.cpu_backend,
          "CPU backend: onednn (oneDNN primitives, the default) or openblas "
          "(im2col + OpenBLAS GEMM, for comparison).");
ABSL_FLAG(bool, cuda_blocking_sync, downpour::BackendFlags{}.cuda_blocking_sync,
          "CUDA backend: a synchronizing thread sleeps instead of spinning a "
          "core (cudaDeviceScheduleBlockingSync).");
ABSL_FLAG(bool, cuda_deterministic, downpour::BackendFlags{}.cuda_deterministic,
          "CUDA backend: deterministic cuDNN convolution algorithms first, so "
          "a step's gradients repeat bit for bit wherever one fits the "
          "workspace (slower: e.g. backward-filter ALGO_1 instead of ALGO_0). "
          "Off: cuDNN's ranking, fastest first.");

namespace downpour {

absl::StatusOr<BackendFlags> BackendFlagsFromFlags() {
  BackendFlags b;
  b.device = absl::GetFlag(FLAGS_device);
  b.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  b.cpu_backend = absl::GetFlag(FLAGS_cpu_backend);
  b.cuda_blocking_sync = absl::GetFlag(FLAGS_cuda_blocking_sync);
  b.cuda_deterministic = absl::GetFlag(FLAGS_cuda_deterministic);
  if (b.cpu_threads < 1) {
    return absl::InvalidArgumentError("--cpu_threads must be >= 1");
  }
  return b;
}

std::vector<std::string> GivenBackendFlagArgs() {
  return GivenFlagArgs(
      {"device", "cpu_threads", "cpu_backend", "cuda_blocking_sync",
       "cuda_deterministic"});
}

}  // namespace downpour
