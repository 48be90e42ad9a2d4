// The CPU half of bench_device.h, shared by both builds.
#include "tests/bench/bench_device.h"

namespace downpour {

BenchDevice OpenCpuBenchDevice(int threads) {
  BenchDevice d;
  d.backend = NewCpuBackend(threads);
  d.host_allocator = DefaultHostAllocator();
  return d;
}

}  // namespace downpour
