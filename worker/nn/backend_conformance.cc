// File: worker/nn/backend_conformance.cc (see backend_conformance.h).
#include "worker/nn/backend_conformance.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/openblas_backend.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

constexpr double kTol = 1e-4;
constexpr double kFloor = 1e-3;

const CudaProbe& Probe() {
  static const CudaProbe* const probe = new CudaProbe(ProbeCuda());
  return *probe;
}

BackendImpl CudaImpl() {
  BackendImpl cuda;
  cuda.name = "CUDA";
  cuda.name_prefix = "cuda:0 (";
  cuda.host_memory = false;
  cuda.unavailable = []() -> std::string {
    if (Probe().device_count > 0) return "";
    return "no usable CUDA device: " + Probe().reason;
  };
  cuda.make = [](int) { return NewCudaBackend(0, CudaBackendOptions()); };
  // The default options choose among the GEMM-family and direct algorithms
  // only (allow_transform_conv_algorithms = false).
  cuda.make_direct = cuda.make;
  return cuda;
}

}  // namespace

std::vector<BackendImpl> AllBackendImpls() {
  std::vector<BackendImpl> all = CpuBackendImpls();
  all.push_back(CudaImpl());
  return all;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& ref,
              int64_t* worst) {
  double max_diff = 0, max_ref = 0;
  int64_t at = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(double{got[i]} - ref[i]);
    if (!(diff <= max_diff)) {  // Also catches NaN.
      max_diff = std::isnan(diff) ? INFINITY : diff;
      at = static_cast<int64_t>(i);
    }
    max_ref = std::max(max_ref, std::fabs(double{ref[i]}));
  }
  if (worst != nullptr) *worst = at;
  return max_diff / std::max(kFloor, max_ref);
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref,
                 const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int64_t worst = -1;
  const double err = RelErr(got, ref, &worst);
  EXPECT_LE(err, kTol) << what << ": worst at " << worst << ": got "
                       << (worst >= 0 ? got[worst] : 0.f) << " reference "
                       << (worst >= 0 ? ref[worst] : 0.f);
}

void ExpectExact(const std::vector<float>& got, const std::vector<float>& ref,
                 const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], ref[i]) << what << " at " << i;
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.f + std::fabs(want[i])))
        << what << " at " << i;
  }
}

void BackendFixture::Open(const BackendImpl& impl, int threads, bool direct) {
  const std::string why = impl.unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<Backend>> b =
      direct ? impl.make_direct(threads) : impl.make(threads);
  ASSERT_TRUE(b.ok()) << impl.name << ": " << b.status();
  be_ = std::move(*b);
}

DeviceBuffer BackendFixture::UploadTo(Backend* be,
                                      const std::vector<float>& v) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Create(be, v.size());
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return DeviceBuffer();
  absl::Status s = be->CopyToDevice(v.data(), b->data(), v.size());
  EXPECT_TRUE(s.ok()) << s;
  return std::move(*b);
}

std::vector<float> BackendFixture::DownloadFrom(Backend* be,
                                                const DeviceBuffer& b) {
  std::vector<float> v(b.size());
  absl::Status s = be->CopyToHost(b.data(), v.data(), b.size());
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

DeviceBuffer BackendFixture::Zeros(int64_t n) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Create(be_.get(), n);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return DeviceBuffer();
  return std::move(*b);
}

void VsReferenceFixture::OpenBoth(const BackendImpl& impl, bool direct) {
  Open(impl, 2, direct);
  if (be_ == nullptr) return;  // Skipped or failed.
  ref_ = NewOpenblasBackend(2);
}

VsReferenceFixture::Pair VsReferenceFixture::Garbage(int64_t n, uint64_t seed) {
  return Upload(RandomVec(n, seed, -7.f, 7.f));
}

}  // namespace downpour
