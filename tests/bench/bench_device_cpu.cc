// The CPU half of bench_device.h, shared by both builds.
#include "tests/bench/bench_device.h"

#include "worker/nn/openblas_backend.h"

namespace downpour {

BenchDevice OpenCpuBenchDevice(int threads) {
  BenchDevice d;
  d.backend = NewOpenblasBackend(threads);
  d.host_allocator = DefaultHostAllocator();
  return d;
}

}  // namespace downpour
