#include "worker/nn/backend_select.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

// A host where one GPU is visible; opening it gives `open_status` (OK: a
// CPU backend stands in for the GPU's).
CudaFactory OneGpu(absl::Status open_status, std::vector<int>* opened) {
  CudaFactory f;
  f.probe = [] {
    CudaProbe p;
    p.device_count = 1;
    p.names = {"Fake GPU"};
    return p;
  };
  f.open = [open_status, opened](int ordinal, const CudaBackendOptions&)
      -> absl::StatusOr<std::unique_ptr<Backend>> {
    opened->push_back(ordinal);
    if (!open_status.ok()) return open_status;
    return NewCpuBackend(1);
  };
  f.pinned = [] { return std::unique_ptr<HostAllocator>(); };
  return f;
}

// Item 7 of issue 17: a visible GPU whose backend fails to start.
TEST(BackendSelectTest, AutoFallsBackToTheCpuWhenTheCudaBackendFails) {
  std::vector<int> opened;
  BackendRequest r;
  r.device = "auto";
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
  r.device = "cuda";
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
  r.device = "tpu";
  EXPECT_EQ(SelectBackends(r, OneGpu(absl::OkStatus(), &opened))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  r.device = "cpu";
  r.gpus = {0};
  EXPECT_EQ(SelectBackends(r, OneGpu(absl::OkStatus(), &opened))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(opened.empty());
}

// The real factory on this machine. Without a GPU (the development box):
// auto gives the CPU with the runtime's reason, cuda is refused.
TEST(BackendSelectTest, RealFactoryWithoutAGpu) {
  if (ProbeCuda().device_count > 0) GTEST_SKIP() << "this machine has a GPU";
  BackendRequest r;
  auto s = SelectBackends(r, RealCudaFactory());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->cuda);
  EXPECT_NE(s->note.find("no usable CUDA device"), std::string::npos);
  r.device = "cuda";
  EXPECT_EQ(SelectBackends(r, RealCudaFactory()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Issue 18: --cpu_backend picks oneDNN (default) or OpenBLAS; anything else
// is refused before any backend opens.
TEST(BackendSelectTest, CpuBackendFlag) {
  std::vector<int> opened;
  BackendRequest r;
  r.device = "cpu";
  auto s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backends[0]->Name(), "cpu (onednn)");
  EXPECT_NE(s->note.find("CPU backend: onednn"), std::string::npos) << s->note;
  r.cpu_backend = "openblas";
  s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backends[0]->Name(), "cpu");
  r.cpu_backend = "mkl";
  r.device = "auto";
  s = SelectBackends(r, OneGpu(absl::OkStatus(), &opened));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--cpu_backend"), std::string::npos);
  EXPECT_TRUE(opened.empty());
}

}  // namespace
}  // namespace downpour
