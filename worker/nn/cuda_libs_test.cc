// Tests of cuda_libs.h on the real libraries wherever this machine has them
// (the CUDA toolkit here; PyTorch's wheels on a GPU host, found through the
// bundle's LD_LIBRARY_PATH): loading needs no GPU and no driver.
#include "worker/nn/cuda_libs.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/nn/cuda_versions.h"

namespace downpour {
namespace {


TEST(CudaLibsTest, SonamesMatchTheHeaders) {
  EXPECT_EQ(std::string(CudaLibSoname(CudaLib::kCublas)),
            "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  EXPECT_EQ(std::string(CudaLibSoname(CudaLib::kCudnn)),
            "libcudnn.so." + std::to_string(CUDNN_MAJOR));
}

TEST(CudaLibsTest, MissingLibraryIsNamedWithEveryPlaceTried) {
  const absl::StatusOr<void*> h =
      OpenCudaLibrary("libdownpour_absent.so.7", {"/nonexistent/dir"});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(h.status().message());
  EXPECT_NE(m.find("cannot load libdownpour_absent.so.7"), std::string::npos)
      << m;
  EXPECT_NE(m.find("/nonexistent/dir"), std::string::npos) << m;
}

// Loads cuBLAS and cuDNN and calls through the stubs. Runs in this test's
// own process, so it is the first load. Skips (not "no usable CUDA device":
// no GPU is needed) where either library cannot be found.
TEST(CudaLibsTest, LoadsAndForwardsAndTheVersionsFit) {
  if (absl::Status s = LoadCudaLibraries(); !s.ok()) {
    GTEST_SKIP() << "cuBLAS " << CUBLAS_VER_MAJOR << " / cuDNN " << CUDNN_MAJOR
                 << " cannot be loaded here: " << s;
  }
  EXPECT_NE(CudaLibrariesDescription().find("libcudnn.so.9 from /"),
            std::string::npos)
      << CudaLibrariesDescription();
  const size_t cudnn = cudnnGetVersion();
  EXPECT_EQ(cudnn / 10000, static_cast<size_t>(CUDNN_MAJOR));
  int runtime = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  EXPECT_TRUE(CheckCudnnVersions(CUDNN_VERSION, cudnn,
                                 cudnnGetCudartVersion(), runtime)
                  .ok())
      << CheckCudnnVersions(CUDNN_VERSION, cudnn, cudnnGetCudartVersion(),
                            runtime);
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_SUCCESS),
               "CUDNN_STATUS_SUCCESS");
  // cuBLAS 13 says "success"; the stub's not-loaded text starts with "(".
  const std::string blas = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  EXPECT_FALSE(blas.empty());
  EXPECT_NE(blas[0], '(') << blas;
  // A descriptor needs the library but no GPU.
  cudnnTensorDescriptor_t d = nullptr;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                       2, 3, 4, 5),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnDestroyTensorDescriptor(d), CUDNN_STATUS_SUCCESS);
}

}  // namespace
}  // namespace downpour
