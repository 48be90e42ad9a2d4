#include "worker/nn/cuda_versions.h"

#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(CudaVersionsTest, Strings) {
  EXPECT_EQ(CudnnVersionString(91900), "9.19.0");
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12090), "12.9");
}

TEST(CudaVersionsTest, SameOrNewerMinorPasses) {
  EXPECT_TRUE(CheckCudnnVersions(91900, 91900, 13000, 13010).ok());
  EXPECT_TRUE(CheckCudnnVersions(91900, 92700, 13000, 13000).ok());
  EXPECT_TRUE(CheckCudnnVersions(91901, 91900, 13000, 13000).ok());  // Patch.
}

TEST(CudaVersionsTest, OlderMinorIsRefusedNamingBoth) {
  const absl::Status s = CheckCudnnVersions(91900, 91000, 13000, 13000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cuDNN is 9.10.0, older than the cuDNN 9.19.0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("a cuDNN 9.19 or newer"), std::string::npos) << s;
}

TEST(CudaVersionsTest, CudnnBuiltForAnotherCudaIsRefusedNamingBoth) {
  const absl::Status s = CheckCudnnVersions(91900, 91900, 12090, 13000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("built for CUDA 12.9"), std::string::npos) << s;
  EXPECT_NE(s.message().find("the CUDA runtime is 13.0"), std::string::npos);
  EXPECT_NE(s.message().find("nvidia-cudnn-cu13"), std::string::npos);
}

TEST(CudaVersionsTest, CudnnMajorMismatchIsRefused) {
  const absl::Status s = CheckCudnnVersions(91900, 80907, 13000, 13000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cuDNN is 8.9.7"), std::string::npos) << s;
  EXPECT_NE(s.message().find("against cuDNN 9.19.0"), std::string::npos);
}

TEST(CudaVersionsTest, UnknownRuntimeIsRefused) {
  const absl::Status s = CheckCudnnVersions(91900, 91900, 13000, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("runtime is unknown"), std::string::npos) << s;
}

}  // namespace
}  // namespace downpour
