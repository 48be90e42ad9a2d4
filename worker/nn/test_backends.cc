// File: worker/nn/test_backends.cc (see test_backends.h).
#include "worker/nn/test_backends.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "worker/nn/onednn_backend.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {

void PrintTo(const BackendImpl& impl, std::ostream* os) { *os << impl.name; }

std::vector<BackendImpl> CpuBackendImpls() {
  BackendImpl openblas;
  openblas.name = "OpenBLAS";
  openblas.name_prefix = "cpu";
  openblas.host_memory = true;
  openblas.unavailable = [] { return std::string(); };
  openblas.make = [](int threads) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return NewOpenblasBackend(threads);
  };
  openblas.make_direct = openblas.make;  // im2col + GEMM: direct sums.
  BackendImpl onednn;
  onednn.name = "oneDNN";
  onednn.name_prefix = "cpu (onednn)";
  onednn.host_memory = true;
  onednn.unavailable = [] { return std::string(); };
  onednn.make = [](int threads) { return NewOnednnBackend(threads); };
  onednn.make_direct = [](int threads) {
    OnednnOptions options;
    options.threads = threads;
    options.winograd = false;
    return NewOnednnBackend(options);
  };
  return {std::move(openblas), std::move(onednn)};
}

std::unique_ptr<Backend> MakeBackendOrDie(const BackendImpl& impl,
                                          int threads) {
  absl::StatusOr<std::unique_ptr<Backend>> b = impl.make(threads);
  if (!b.ok()) {
    std::fprintf(stderr, "%s backend: %s\n", impl.name.c_str(),
                 std::string(b.status().message()).c_str());
    std::abort();  // Programmer/test-environment error.
  }
  return std::move(*b);
}

}  // namespace downpour
