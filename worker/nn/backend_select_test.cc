#include "worker/nn/backend_select.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

// A host where one GPU is visible; opening it gives `open_status` (OK: a
// CPU backend stands in for the GPU's).
CudaFactory OneGpu(absl::Status open_status, std::vector<int>* opened,
                   int gpus = 1, std::vector<int>* pinned_for = nullptr) {
  CudaFactory f;
  f.probe = [gpus] {
    CudaProbe p;
    p.device_count = gpus;
    p.names.assign(gpus, "Fake GPU");
    return p;
  };
  f.open = [open_status, opened](int ordinal, const CudaBackendOptions&)
      -> absl::StatusOr<std::unique_ptr<Backend>> {
    opened->push_back(ordinal);
    if (!open_status.ok()) return open_status;
    return NewOpenblasBackend(1);
  };
  f.pinned = [pinned_for](int ordinal) {
    if (pinned_for != nullptr) pinned_for->push_back(ordinal);
    return std::unique_ptr<HostAllocator>();
  };
  return f;
}

// The pinned allocator is made for the replicas' GPU, not GPU 0: host
// buffers are allocated on batcher threads that never set a device.
TEST(BackendSelectTest, PinnedAllocatorIsForTheFirstListedGpu) {
  std::vector<int> opened, pinned_for;
  BackendRequest r;
  r.device = DeviceKind::kCuda;
  r.gpus = {1, 2};
  auto s = SelectBackends(
      r, OneGpu(absl::OkStatus(), &opened, /*gpus=*/3, &pinned_for));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(opened, (std::vector<int>{1, 2}));
  EXPECT_EQ(pinned_for, std::vector<int>{1});
}

// A visible GPU whose backend fails to start.
TEST(BackendSelectTest, AutoFallsBackToTheCpuWhenTheCudaBackendFails) {
  std::vector<int> opened;
  BackendRequest r;
  r.device = DeviceKind::kAuto;
  r.cpu_replicas = 2;
  auto s = SelectBackends(
      r, OneGpu(absl::FailedPreconditionError("cannot load libcudnn.so.9"),
                &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->cuda);
  EXPECT_EQ(s->backends.size(), 2u);
  EXPECT_EQ(s->backends[0]->Name(), "cpu (onednn)");  // The default.
  EXPECT_EQ(opened, std::vector<int>{0});
  EXPECT_NE(s->note.find("Fake GPU"), std::string::npos) << s->note;
  EXPECT_NE(s->note.find("cannot load libcudnn.so.9"), std::string::npos);
  EXPECT_NE(s->note.find("using the CPU backend"), std::string::npos);
}

TEST(BackendSelectTest, CudaRequestedAndFailingIsAnError) {
  std::vector<int> opened;
  BackendRequest r;
  r.device = DeviceKind::kCuda;
  auto s = SelectBackends(
      r, OneGpu(absl::ResourceExhaustedError("out of memory"), &opened));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BackendSelectTest, AutoUsesAWorkingGpuOnePerListedOrdinal) {
  std::vector<int> opened;
  BackendRequest r;
  r.gpus = {0, 0};
  auto s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->cuda);
  EXPECT_EQ(s->backends.size(), 2u);
  EXPECT_EQ(opened, (std::vector<int>{0, 0}));
  r.single = true;  // eval: one replica.
  s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->backends.size(), 1u);
  r.gpus = {1};
  s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackendSelectTest, BadRequests) {
  std::vector<int> opened;
  BackendRequest r;
  // An unknown device is refused where the flag is parsed.
  DeviceKind d;
  std::string error;
  EXPECT_FALSE(AbslParseFlag("tpu", &d, &error));
  EXPECT_NE(error.find("auto, cpu or cuda"), std::string::npos) << error;
  r.device = DeviceKind::kCpu;
  r.gpus = {0};
  EXPECT_EQ(SelectBackends(r, OneGpu(absl::OkStatus(), &opened))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(opened.empty());
}

// A host without a usable GPU, as the CUDA runtime reports it on a machine
// without a driver.
CudaFactory NoGpu(std::vector<int>* opened) {
  CudaFactory f = OneGpu(absl::OkStatus(), opened);
  f.probe = [] {
    CudaProbe p;
    p.reason =
        "cudaGetDeviceCount failed: cudaErrorInsufficientDriver (CUDA driver "
        "version is insufficient for CUDA runtime version)";
    return p;
  };
  return f;
}

// --device=auto without a GPU says so in one plain line naming the CPU
// backend; the runtime's reason is kept aside, and is in the errors of
// --device=cuda and --gpus.
TEST(BackendSelectTest, AutoWithoutAGpuSaysSoPlainly) {
  std::vector<int> opened;
  BackendRequest r;
  auto s = SelectBackends(r, NoGpu(&opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->cuda);
  EXPECT_EQ(s->backends[0]->Name(), "cpu (onednn)");
  EXPECT_EQ(s->note, "no GPU found: training on the CPU (oneDNN)");
  EXPECT_NE(s->detail.find("cudaErrorInsufficientDriver"), std::string::npos);
  r.cpu_backend = CpuBackendKind::kOpenblas;
  s = SelectBackends(r, NoGpu(&opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backends[0]->Name(), "cpu");
  EXPECT_EQ(s->note, "no GPU found: training on the CPU (OpenBLAS)");

  r.device = DeviceKind::kCuda;
  s = SelectBackends(r, NoGpu(&opened));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--device=cuda"), std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("CUDA driver version is insufficient"),
            std::string::npos)
      << s.status();
  r.device = DeviceKind::kAuto;
  r.gpus = {0};
  s = SelectBackends(r, NoGpu(&opened));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--gpus"), std::string::npos);
  EXPECT_TRUE(opened.empty());
}

// The real factory on this machine. Without a GPU (the development box):
// auto gives the CPU with one plain line, cuda is refused with the runtime's
// reason.
TEST(BackendSelectTest, RealFactoryWithoutAGpu) {
  const CudaProbe probe = ProbeCuda();
  if (probe.device_count > 0) GTEST_SKIP() << "this machine has a GPU";
  BackendRequest r;
  auto s = SelectBackends(r, RealCudaFactory());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->cuda);
  EXPECT_EQ(s->note, "no GPU found: training on the CPU (oneDNN)");
  EXPECT_EQ(s->detail, probe.reason);
  r.device = DeviceKind::kCuda;
  s = SelectBackends(r, RealCudaFactory());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("no CUDA device is usable"),
            std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find(probe.reason), std::string::npos)
      << s.status();
}

// --cpu_backend picks oneDNN (default) or OpenBLAS; anything else
// is refused before any backend opens.
TEST(BackendSelectTest, CpuBackendFlag) {
  std::vector<int> opened;
  BackendRequest r;
  r.device = DeviceKind::kCpu;
  auto s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backends[0]->Name(), "cpu (onednn)");
  EXPECT_NE(s->note.find("CPU backend: onednn"), std::string::npos) << s->note;
  r.cpu_backend = CpuBackendKind::kOpenblas;
  s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backends[0]->Name(), "cpu");
  // Anything else is refused where the flag is parsed.
  CpuBackendKind kind;
  std::string error;
  EXPECT_FALSE(AbslParseFlag("mkl", &kind, &error));
  EXPECT_NE(error.find("onednn or openblas"), std::string::npos) << error;
  EXPECT_TRUE(opened.empty());
}

}  // namespace
}  // namespace downpour
