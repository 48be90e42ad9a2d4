// File: worker/nn/test_cpu_backend.h
//
// Test-only: the CPU backend a test binary checks. The backend and model
// tests are compiled twice (worker/nn/BUILD): plain for the OpenBLAS
// backend, with -DDP_TEST_ONEDNN for the oneDNN backend, so every op and the
// finite-difference checks run against both.
//
//   std::unique_ptr<Backend> be = NewTestCpuBackend(/*threads=*/2);
#ifndef DOWNPOUR_WORKER_NN_TEST_CPU_BACKEND_H_
#define DOWNPOUR_WORKER_NN_TEST_CPU_BACKEND_H_

#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "worker/nn/backend.h"
#ifdef DP_TEST_ONEDNN
#include "worker/nn/onednn_backend.h"
#endif

namespace downpour {

inline std::unique_ptr<Backend> NewTestCpuBackend(int threads) {
#ifdef DP_TEST_ONEDNN
  auto b = NewOnednnBackend(threads);
  if (!b.ok()) {
    std::fprintf(stderr, "NewOnednnBackend: %s\n",
                 std::string(b.status().message()).c_str());
    std::abort();  // Programmer/test-environment error.
  }
  return std::move(*b);
#else
  return NewCpuBackend(threads);
#endif
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_TEST_CPU_BACKEND_H_
