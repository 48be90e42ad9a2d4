// File: tests/bench/bench_device.h
//
// Opens the compute device that compute_bench measures: a Backend plus the
// HostAllocator its host staging buffers (parameters, gradients, input
// batches) come from, which for CUDA is page-locked memory, as in a worker.
// compute_bench's main builds BenchDeviceOptions from its flags and hands the
// opened device to the measuring code; nothing below main chooses one.
//
// Usage:
//   BenchDeviceOptions o;  o.device = DeviceKind::kCuda;  o.gpu = 0;
//   DP_ASSIGN_OR_RETURN(BenchDevice dev, OpenBenchDevice(o));
//   BuildModel("fashion_cnn", dev.backend.get(), 256);
//   DP_ASSIGN_OR_RETURN(auto params,
//                       HostArray<float>::Create(dev.host_allocator, n));
#ifndef DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_
#define DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "worker/nn/backend.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/device_kind.h"

namespace downpour {

struct BenchDeviceOptions {
  // auto: CUDA when a GPU is usable, else the CPU.
  DeviceKind device = DeviceKind::kAuto;
  int gpu = 0;  // CUDA device ordinal.
  CudaBackendOptions cuda;
  // The CPU backend, its threads (>= 1), and for oneDNN whether Winograd
  // convolutions may be used (OnednnOptions::winograd).
  CpuBackendKind cpu_backend = CpuBackendKind::kOnednn;
  int cpu_threads = 1;
  bool onednn_winograd = true;
};

struct BenchDevice {
  std::unique_ptr<Backend> backend;
  bool cuda = false;
  // Set when the device brings its own host allocator (CUDA: pinned).
  std::unique_ptr<HostAllocator> owned_allocator;
  // owned_allocator, or DefaultHostAllocator(). Not owned.
  HostAllocator* host_allocator = nullptr;
  // With device "auto": which device was chosen and why, one line.
  std::string note;
};

// Errors: FailedPrecondition for kCuda when there is no usable GPU (the
// message carries the CUDA runtime's reason, e.g. no driver);
// InvalidArgument for an ordinal out of range; ResourceExhausted when no
// pinned memory can be had; the backend's error when it fails to start.
// With kAuto, a GPU that is missing or fails to start means the CPU, said in
// `note`.
absl::StatusOr<BenchDevice> OpenBenchDevice(const BenchDeviceOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_
