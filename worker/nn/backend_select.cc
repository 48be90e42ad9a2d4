// File: worker/nn/backend_select.cc (see backend_select.h).
#include "worker/nn/backend_select.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/nn/onednn_backend.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

absl::StatusOr<SelectedBackends> CpuBackends(const BackendRequest& r,
                                             std::string note) {
  SelectedBackends s;
  const int n = r.single ? 1 : std::max(1, r.cpu_replicas);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<Backend>> b =
        NewCpuBackend(r.cpu_backend, r.cpu_threads);
    if (!b.ok()) return b.status();
    s.backends.push_back(std::move(*b));
  }
  s.note = std::move(note);
  return s;
}

// Opens one CUDA backend per replica; the first failure is returned.
absl::StatusOr<SelectedBackends> OpenCuda(const BackendRequest& r,
                                          const CudaFactory& f,
                                          const std::vector<int>& devices) {
  SelectedBackends s;
  s.cuda = true;
  for (int d : devices) {
    absl::StatusOr<std::unique_ptr<Backend>> b = f.open(d, r.cuda);
    if (!b.ok()) return b.status();
    s.backends.push_back(std::move(*b));
  }
  // Host buffers are allocated on threads that never set a device (the
  // batchers'): the allocator makes the first replica's GPU current there.
  s.pinned = f.pinned(devices.front());
  return s;
}

}  // namespace

CudaFactory RealCudaFactory() {
  CudaFactory f;
  f.probe = [] { return ProbeCuda(); };
  f.open = [](int ordinal, const CudaBackendOptions& o) {
    return NewCudaBackend(ordinal, o);
  };
  f.pinned = [](int ordinal) { return NewCudaPinnedHostAllocator(ordinal); };
  return f;
}

absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(CpuBackendKind kind,
                                                       int threads) {
  if (kind == CpuBackendKind::kOpenblas) return NewOpenblasBackend(threads);
  return NewOnednnBackend(threads);
}

absl::StatusOr<SelectedBackends> SelectBackends(const BackendRequest& r,
                                                const CudaFactory& f) {
  if (r.device == DeviceKind::kCpu) {
    if (!r.gpus.empty()) {
      return absl::InvalidArgumentError("--gpus needs --device=cuda or auto");
    }
    return CpuBackends(r, absl::StrCat("using the CPU backend (--device=cpu)",
                                       "; CPU backend: ", CpuBackendName(r.cpu_backend)));
  }
  const CudaProbe probe = f.probe();
  if (probe.device_count == 0) {
    if (r.device == DeviceKind::kCuda || !r.gpus.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          r.device == DeviceKind::kCuda ? "--device=cuda" : "--gpus",
          " was requested but no CUDA device is usable: ", probe.reason));
    }
    // The usual case on a machine without a GPU, not a fault: one plain
    // line. The runtime's reason (e.g. "CUDA driver version is
    // insufficient") stays in `detail`.
    absl::StatusOr<SelectedBackends> cpu = CpuBackends(
        r, absl::StrCat("no GPU found: training on the CPU (",
                        CpuLibraryName(r.cpu_backend), ")"));
    if (cpu.ok()) cpu->detail = probe.reason;
    return cpu;
  }
  for (int g : r.gpus) {
    if (g < 0 || g >= probe.device_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus lists GPU ", g, " but this host has ", probe.device_count));
    }
  }
  std::vector<int> devices = r.gpus;
  if (devices.empty()) devices = {0};
  if (r.single) devices.resize(1);
  absl::StatusOr<SelectedBackends> cuda = OpenCuda(r, f, devices);
  if (cuda.ok()) {
    cuda->note = absl::StrCat(
        "--device=", DeviceKindName(r.device), ": using CUDA (", probe.device_count, " GPU",
        probe.device_count == 1 ? "" : "s", ": ",
        absl::StrJoin(probe.names, ", "), "; replicas on GPU ",
        absl::StrJoin(devices, ","), ")");
    return cuda;
  }
  if (r.device == DeviceKind::kCuda) return cuda.status();
  return CpuBackends(
      r, absl::StrCat("--device=auto: a GPU is visible (",
                      absl::StrJoin(probe.names, ", "),
                      ") but the CUDA backend failed to start: ",
                      cuda.status().message(), "; using the CPU backend",
                      "; CPU backend: ", CpuBackendName(r.cpu_backend)));
}

}  // namespace downpour
