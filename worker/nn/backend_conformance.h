// File: worker/nn/backend_conformance.h
//
// Test-only: the fixtures of the backend conformance suite
// (backend_conformance_test.cc, backend_conformance_layers_test.cc), which
// every Backend implementation instantiates: OpenBLAS, oneDNN and CUDA.
//
//  * BackendTest runs one backend's ops against naive host references.
//  * VsReferenceTest runs the same inputs through the backend under test and
//    the reference backend (OpenBLAS, 2 threads), and compares the results:
//      RelErr(got, ref) = max_i |got_i - ref_i| / max(1e-3, max_i |ref_i|)
//    must be <= 1e-4 per output tensor. (Normalizing by the tensor's largest
//    magnitude makes the bound scale-free; the 1e-3 floor keeps all-but-zero
//    tensors from turning float noise into large ratios.) Operations without
//    arithmetic (copies, ReLU, max pooling) must agree exactly, and integer
//    outputs (correct counts) exactly.
//
// An implementation that cannot run here (the CUDA backend without a usable
// GPU) makes its tests skip, with the reason.
//
//   class MyTest : public VsReferenceTest {};
//   TEST_P(MyTest, Fill) {
//     Pair y = Garbage(10, 1);
//     BOTH(be->Fill(pick(y).data(), 10, 2.f));
//     ExpectSame(y, "fill");
//   }
#ifndef DOWNPOUR_WORKER_NN_BACKEND_CONFORMANCE_H_
#define DOWNPOUR_WORKER_NN_BACKEND_CONFORMANCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/test_backends.h"

namespace downpour {

// CpuBackendImpls() and the CUDA backend (unavailable without a GPU).
std::vector<BackendImpl> AllBackendImpls();

// Relative error of `got` against `ref` (see above); *worst gets the index
// of the largest difference (-1 when none).
double RelErr(const std::vector<float>& got, const std::vector<float>& ref,
              int64_t* worst = nullptr);
// RelErr(got, ref) <= 1e-4.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref,
                 const std::string& what);
// Bitwise the same values.
void ExpectExact(const std::vector<float>& got, const std::vector<float>& ref,
                 const std::string& what);
// |got_i - want_i| <= tol * (1 + |want_i|) for every i.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float tol, const char* what);

// Buffers of one backend under test, `be_`.
class BackendFixture : public ::testing::Test {
 protected:
  // Opens be_ from impl (impl.make_direct with `direct`) with `threads`
  // threads, or skips the test when impl cannot run here. Call from SetUp().
  void Open(const BackendImpl& impl, int threads, bool direct = false);

  // A fresh buffer of `be` holding v.
  DeviceBuffer UploadTo(Backend* be, const std::vector<float>& v);
  std::vector<float> DownloadFrom(Backend* be, const DeviceBuffer& b);
  DeviceBuffer Upload(const std::vector<float>& v) {
    return UploadTo(be_.get(), v);
  }
  DeviceBuffer Zeros(int64_t n);
  std::vector<float> Download(const DeviceBuffer& b) {
    return DownloadFrom(be_.get(), b);
  }

  std::unique_ptr<Backend> be_;
};

// Parameter: the implementation. be_ has 3 threads (on a two-core machine,
// uneven and empty work splits too).
class BackendTest : public BackendFixture,
                    public ::testing::WithParamInterface<BackendImpl> {
 protected:
  void SetUp() override { Open(GetParam(), 3); }
};

// The backend under test, be_ (2 threads), beside the reference, ref_.
class VsReferenceFixture : public BackendFixture {
 protected:
  // The same data in a buffer of each backend.
  struct Pair {
    DeviceBuffer ref, got;
  };

  // Opens be_ (or skips; see Open) and ref_.
  void OpenBoth(const BackendImpl& impl, bool direct = false);

  Pair Upload(const std::vector<float>& v) {
    return Pair{UploadTo(ref_.get(), v), UploadTo(be_.get(), v)};
  }
  // Random contents: outputs that must be overwritten start as garbage.
  Pair Garbage(int64_t n, uint64_t seed);
  std::vector<float> Got(const Pair& p) {
    return DownloadFrom(be_.get(), p.got);
  }
  std::vector<float> Ref(const Pair& p) {
    return DownloadFrom(ref_.get(), p.ref);
  }
  void ExpectSame(const Pair& p, const std::string& what) {
    ExpectClose(Got(p), Ref(p), what);
  }

  std::unique_ptr<Backend> ref_;
};

class VsReferenceTest : public VsReferenceFixture,
                        public ::testing::WithParamInterface<BackendImpl> {
 protected:
  void SetUp() override { OpenBoth(GetParam()); }
};

// Runs `op` on the reference (dp_i == 0), then on the backend under test
// (dp_i == 1); op sees the backend as `be` and picks that backend's buffer
// of a Pair with pick(pair). Returns from the test when op fails.
#define BOTH(op)                                              \
  do {                                                        \
    for (int dp_i = 0; dp_i < 2; ++dp_i) {                    \
      Backend* be = dp_i ? be_.get() : ref_.get();            \
      auto pick = [dp_i](auto& pair) -> auto& {               \
        return dp_i ? pair.got : pair.ref;                    \
      };                                                      \
      absl::Status dp_s = (op);                               \
      ASSERT_TRUE(dp_s.ok())                                  \
          << (dp_i ? "under test: " : "reference: ") << dp_s; \
      (void)pick;                                             \
    }                                                         \
  } while (0)

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_BACKEND_CONFORMANCE_H_
