// File: tests/bench/bench_device.h
//
// Opens the compute device that gpu_bench measures: a Backend plus the
// HostAllocator its host staging buffers (parameters, gradients, input
// batches) come from, which for CUDA is page-locked memory, as in a worker.
// The device is picked by gpu_bench's main from its flags and handed to the
// measuring code; nothing below main chooses one.
//
// bench_device_cuda.cc opens the CUDA device (//worker/nn:cuda_backend),
// bench_device_cpu.cc the CPU one.
//
// Usage:
//   CudaBenchOptions o; o.device_ordinal = 0;
//   DP_ASSIGN_OR_RETURN(BenchDevice dev, OpenCudaBenchDevice(o));
//   BuildModel("fashion_cnn", dev.backend.get(), 256);
//   DP_ASSIGN_OR_RETURN(auto params,
//                       HostArray<float>::Create(dev.host_allocator, n));
#ifndef DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_
#define DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "worker/nn/backend.h"

namespace downpour {

struct BenchDevice {
  std::unique_ptr<Backend> backend;
  // Set when the device brings its own host allocator (CUDA: pinned).
  std::unique_ptr<HostAllocator> owned_allocator;
  // owned_allocator, or DefaultHostAllocator(). Not owned.
  HostAllocator* host_allocator = nullptr;
};

struct CudaBenchOptions {
  int device_ordinal = 0;
  // cuDNN workspace limit; < 0 keeps CudaBackendOptions' default.
  int64_t workspace_limit_bytes = -1;
  bool allow_tf32 = false;     // CudaBackendOptions::allow_tf32
  bool blocking_sync = false;  // CudaBackendOptions::blocking_sync
};

// The CUDA backend on options.device_ordinal with pinned host buffers.
// Errors: FailedPrecondition when there is no usable GPU (the message carries the
// CUDA runtime's reason, e.g. no driver); InvalidArgument for an ordinal out
// of range; ResourceExhausted when no pinned memory can be had.
absl::StatusOr<BenchDevice> OpenCudaBenchDevice(const CudaBenchOptions& options);

// The CPU backend (OpenBLAS; `threads` <= 0 keeps OpenBLAS's default) with
// ordinary aligned host memory.
BenchDevice OpenCpuBenchDevice(int threads);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_BENCH_DEVICE_H_
