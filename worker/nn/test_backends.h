// File: worker/nn/test_backends.h
//
// Test-only: the backend implementations the shared tests run on, as a list
// of factories for gtest's value-parameterized tests. The conformance suite
// (backend_conformance_test.cc) runs on CpuBackendImpls() plus the CUDA
// backend; the model tests (model_test.cc), whose harness uses host memory
// as backend memory, on CpuBackendImpls().
//
//   class MyTest : public ::testing::TestWithParam<BackendImpl> {};
//   TEST_P(MyTest, Works) {
//     std::unique_ptr<Backend> be = MakeBackendOrDie(GetParam(),
//     /*threads=*/2);
//   }
//   INSTANTIATE_TEST_SUITE_P(Cpu, MyTest,
//                            ::testing::ValuesIn(CpuBackendImpls()),
//                            BackendImplName());
#ifndef DOWNPOUR_WORKER_NN_TEST_BACKENDS_H_
#define DOWNPOUR_WORKER_NN_TEST_BACKENDS_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"

namespace downpour {

// One backend implementation under test.
struct BackendImpl {
  // The suffix of the test names: "OpenBLAS", "oneDNN", "CUDA".
  std::string name;
  // What Backend::Name() starts with, e.g. "cpu (onednn)".
  std::string name_prefix;
  // Allocate() returns host memory the test may read directly.
  bool host_memory = false;
  // Why the implementation cannot run on this machine (e.g. no GPU); empty
  // when it can.
  std::function<std::string()> unavailable;
  // A fresh backend with `threads` threads (ignored where meaningless).
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(int threads)> make;
  // As `make`, but its convolutions sum products directly (no Winograd or
  // FFT transforms, which round differently): on inputs whose products and
  // partial sums are exact floats, such backends agree bit for bit.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(int threads)>
      make_direct;
};

// For gtest's messages.
void PrintTo(const BackendImpl& impl, std::ostream* os);

// The OpenBLAS and oneDNN backends.
std::vector<BackendImpl> CpuBackendImpls();

// impl.make(threads); aborts with the error when it fails (for
// implementations that are always available, as the CPU ones).
std::unique_ptr<Backend> MakeBackendOrDie(const BackendImpl& impl, int threads);

// Names value-parameterized tests after the implementation.
struct BackendImplName {
  std::string operator()(
      const ::testing::TestParamInfo<BackendImpl>& info) const {
    return info.param.name;
  }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_TEST_BACKENDS_H_
