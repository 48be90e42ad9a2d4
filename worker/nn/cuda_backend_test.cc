// Tests of what is particular to the CUDA backend: ProbeCuda, the factory
// and the pinned host allocator on machines with and without a GPU, the copy
// stream's ordering, and the convolution bias gradient's own reduction. Every
// Backend operation, every layer and fashion_cnn's gradients are checked
// against the CPU reference by the conformance suite
// (backend_conformance_test.cc), on CUDA as on the CPU backends.
//
// The NoGpu* tests run everywhere and check the no-GPU paths (or, on a GPU
// machine, the device name); the others skip, with ProbeCuda()'s reason,
// when no usable CUDA device exists.
#include "worker/nn/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

const CudaProbe& Probe() {
  static const CudaProbe* const probe = new CudaProbe(ProbeCuda());
  return *probe;
}

// ---- No-GPU paths (run everywhere) ------------------------------------------

TEST(NoGpuTest, ProbeAndFactoryFailCleanlyOrNameTheDevice) {
  const CudaProbe probe = ProbeCuda();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewCudaBackend(0, CudaBackendOptions());
  if (probe.device_count == 0) {
    EXPECT_FALSE(probe.reason.empty());
    EXPECT_TRUE(probe.names.empty());
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr("no usable CUDA device"));
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr(probe.reason));
    std::printf("no GPU here, as expected on CPU machines: %s\n",
                std::string(backend.status().message()).c_str());
  } else {
    EXPECT_TRUE(probe.reason.empty());
    ASSERT_EQ(static_cast<int>(probe.names.size()), probe.device_count);
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->Name(), "cuda:0 (" + probe.names[0] + ")");
    std::printf("backend: %s\n", (*backend)->Name().c_str());
  }
  // Bad ordinals and options fail either way, without crashing.
  EXPECT_FALSE(NewCudaBackend(-1, CudaBackendOptions()).ok());
  EXPECT_FALSE(NewCudaBackend(probe.device_count, CudaBackendOptions()).ok());
  CudaBackendOptions bad;
  bad.workspace_limit_bytes = -1;
  EXPECT_EQ(NewCudaBackend(0, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NoGpuTest, PinnedAllocator) {
  std::unique_ptr<HostAllocator> alloc = NewCudaPinnedHostAllocator();
  ASSERT_NE(alloc, nullptr);
  EXPECT_STREQ(alloc->Name(), "cuda-pinned");
  alloc->Free(nullptr);  // A no-op.
  void* p = alloc->Allocate(1000);
  if (Probe().device_count == 0) {
    EXPECT_EQ(p, nullptr);  // No silent fallback to pageable memory.
    return;
  }
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 0x5a, 1000);
  alloc->Free(p);
  void* empty = alloc->Allocate(0);
  EXPECT_NE(empty, nullptr);
  alloc->Free(empty);
}

// ---- With a GPU -------------------------------------------------------------

// Device 0's backend (a test failure if it cannot be made).
std::unique_ptr<Backend> NewGpu(
    const CudaBackendOptions& options = CudaBackendOptions()) {
  absl::StatusOr<std::unique_ptr<Backend>> gpu = NewCudaBackend(0, options);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  return gpu.ok() ? std::move(*gpu) : nullptr;
}

// CopyToHostAsync copies what the compute stream produced before it, on the
// copy stream; work queued after OrderAfterHostCopies (writing the copied
// buffer) cannot overtake the copy; WaitHostCopies from another thread
// waits for it.
TEST(CudaBackendTest, AsyncCopyToHostIsOrderedBothWays) {
  if (Probe().device_count <= 0) {
    GTEST_SKIP() << "no usable CUDA device: " << Probe().reason;
  }
  const std::unique_ptr<Backend> gpu_owned = NewGpu();
  ASSERT_NE(gpu_owned, nullptr);
  Backend& gpu = *gpu_owned;
  constexpr int64_t kN = 1 << 22;  // 16 MiB: a copy that takes a while.
  absl::StatusOr<DeviceBuffer> d = DeviceBuffer::Create(&gpu, kN);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<HostArray<float>> host_or =
      HostArray<float>::Create(gpu.staging_allocator(), kN);
  ASSERT_TRUE(host_or.ok()) << host_or.status();
  HostArray<float>& host = *host_or;
  for (int round = 0; round < 3; ++round) {
    const float before = 1.0f + round, after = -7.0f - round;
    ASSERT_TRUE(gpu.Fill(d->data(), kN, before).ok());
    ASSERT_TRUE(gpu.CopyToHostAsync(d->data(), host.data(), kN).ok());
    ASSERT_TRUE(gpu.OrderAfterHostCopies().ok());
    ASSERT_TRUE(gpu.Fill(d->data(), kN, after).ok());
    absl::Status waited;
    std::thread other([&] { waited = gpu.WaitHostCopies(); });
    other.join();
    ASSERT_TRUE(waited.ok()) << waited;
    int64_t wrong = 0;
    for (int64_t i = 0; i < kN; ++i) wrong += host[i] != before;
    EXPECT_EQ(wrong, 0) << "round " << round;
    ASSERT_TRUE(gpu.Synchronize().ok());
    std::vector<float> back(kN);
    ASSERT_TRUE(gpu.CopyToHost(d->data(), back.data(), kN).ok());
    EXPECT_EQ(back[kN - 1], after);
  }
  EXPECT_FALSE(gpu.CopyToHostAsync(d->data(), host.data(), -1).ok());
  EXPECT_TRUE(gpu.CopyToHostAsync(d->data(), host.data(), 0).ok());
}

// A convolution's bias gradient over a batch the reduction splits into
// several slices (70 images of 16 x 16 outputs: 64 + 6), against a sum in
// double; with deterministic algorithms the weight gradient repeats bit for
// bit, and the bias gradient does in any case.
TEST(CudaBackendTest, ConvBiasGradientSumsEverySliceAndRepeats) {
  if (Probe().device_count <= 0) {
    GTEST_SKIP() << "no usable CUDA device: " << Probe().reason;
  }
  CudaBackendOptions options;
  options.deterministic_conv_algorithms = true;
  const std::unique_ptr<Backend> gpu_owned = NewGpu(options);
  ASSERT_NE(gpu_owned, nullptr);
  Backend& gpu = *gpu_owned;
  ConvDesc d;
  d.batch = 70;
  d.in_channels = 2;
  d.in_h = d.in_w = 18;
  d.out_channels = 3;
  const int64_t hw = int64_t{d.OutH()} * d.OutW();
  ASSERT_EQ(hw, 256);
  const int64_t nx = int64_t{d.batch} * d.in_channels * d.in_h * d.in_w;
  const int64_t ny = d.batch * d.out_channels * hw;
  const int64_t nw = int64_t{d.out_channels} * d.in_channels * 9;
  const std::vector<float> x = RandomVec(nx, 3), dy = RandomVec(ny, 4);
  absl::StatusOr<DeviceBuffer> dx = DeviceBuffer::Create(&gpu, nx);
  absl::StatusOr<DeviceBuffer> ddy = DeviceBuffer::Create(&gpu, ny);
  absl::StatusOr<DeviceBuffer> dw = DeviceBuffer::Create(&gpu, nw);
  absl::StatusOr<DeviceBuffer> db = DeviceBuffer::Create(&gpu, d.out_channels);
  ASSERT_TRUE(dx.ok() && ddy.ok() && dw.ok() && db.ok());
  ASSERT_TRUE(gpu.CopyToDevice(x.data(), dx->data(), nx).ok());
  ASSERT_TRUE(gpu.CopyToDevice(dy.data(), ddy->data(), ny).ok());
  std::vector<float> w_first, b_first;
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(gpu.Fill(db->data(), d.out_channels, 123.f).ok());
    const absl::Status s = gpu.Conv2dBackwardFilter(
        d, dx->data(), ddy->data(), dw->data(), db->data());
    ASSERT_TRUE(s.ok()) << s;
    std::vector<float> w(nw), b(d.out_channels);
    ASSERT_TRUE(gpu.CopyToHost(dw->data(), w.data(), nw).ok());
    ASSERT_TRUE(gpu.CopyToHost(db->data(), b.data(), d.out_channels).ok());
    for (int c = 0; c < d.out_channels; ++c) {
      double want = 0;
      for (int n = 0; n < d.batch; ++n) {
        for (int64_t i = 0; i < hw; ++i) {
          want += dy[(int64_t{n} * d.out_channels + c) * hw + i];
        }
      }
      EXPECT_NEAR(b[c], want, 1e-4 * (1 + std::abs(want))) << "channel " << c;
    }
    if (round == 0) {
      w_first = w;
      b_first = b;
    } else {
      EXPECT_EQ(w, w_first) << "deterministic weight gradient";
      EXPECT_EQ(b, b_first) << "bias gradient";
    }
  }
}

// Round trips through an independent pinned allocator's memory; the
// backend's staging memory is pinned too. (Every Backend operation, on CUDA
// as on the CPU backends, is checked by backend_conformance_test.cc.)
TEST(CudaBackendTest, PinnedRoundTrip) {
  if (Probe().device_count <= 0) {
    GTEST_SKIP() << "no usable CUDA device: " << Probe().reason;
  }
  const std::unique_ptr<Backend> gpu_owned = NewGpu();
  ASSERT_NE(gpu_owned, nullptr);
  Backend& gpu = *gpu_owned;
  ASSERT_NE(gpu.staging_allocator(), nullptr);
  EXPECT_STREQ(gpu.staging_allocator()->Name(), "cuda-pinned");

  const std::vector<float> v = RandomVec(4099, 1);
  std::unique_ptr<HostAllocator> pinned = NewCudaPinnedHostAllocator();
  absl::StatusOr<HostArray<float>> src_or =
      HostArray<float>::Create(pinned.get(), v.size());
  absl::StatusOr<HostArray<float>> dst_or =
      HostArray<float>::Create(pinned.get(), v.size());
  ASSERT_TRUE(src_or.ok()) << src_or.status();
  ASSERT_TRUE(dst_or.ok()) << dst_or.status();
  HostArray<float>& src = *src_or;
  HostArray<float>& dst = *dst_or;
  std::copy(v.begin(), v.end(), src.begin());
  absl::StatusOr<DeviceBuffer> d2 = DeviceBuffer::Create(&gpu, v.size());
  ASSERT_TRUE(d2.ok()) << d2.status();
  ASSERT_TRUE(gpu.CopyToDevice(src.data(), d2->data(), v.size()).ok());
  ASSERT_TRUE(gpu.Synchronize().ok());
  ASSERT_TRUE(gpu.CopyToHost(d2->data(), dst.data(), v.size()).ok());
  EXPECT_EQ(std::vector<float>(dst.begin(), dst.end()), v)
      << "pinned round trip";
  ASSERT_TRUE(gpu.CopyToDevice(v.data(), d2->data(), 0).ok());
}

}  // namespace
}  // namespace downpour
