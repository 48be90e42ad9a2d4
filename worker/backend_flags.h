// File: worker/backend_flags.h
//
// Where a worker computes, defined once for ps_worker, the launcher (which
// passes them on) and the compute benchmark: --device, --cpu_threads,
// --cpu_backend, --cuda_blocking_sync and --cuda_deterministic. (The
// replicas' GPUs, --gpus, are part of the job's shape: common/job_flags.h.)
// Only a main calls these.
#ifndef DOWNPOUR_WORKER_BACKEND_FLAGS_H_
#define DOWNPOUR_WORKER_BACKEND_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/nn/device_kind.h"

namespace downpour {

struct BackendFlags {
  DeviceKind device = DeviceKind::kAuto;
  int cpu_threads = 1;  // Threads of the CPU backend.
  CpuBackendKind cpu_backend = CpuBackendKind::kOnednn;
  bool cuda_blocking_sync = false;  // cudaDeviceScheduleBlockingSync.
  bool cuda_deterministic = false;  // Deterministic cuDNN algorithms first.
};

// InvalidArgument naming the flag for a bad count (unknown devices and
// backends are refused while the command line is parsed).
absl::StatusOr<BackendFlags> BackendFlagsFromFlags();

// "--name=value" for each backend flag given on the command line.
std::vector<std::string> GivenBackendFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_BACKEND_FLAGS_H_
