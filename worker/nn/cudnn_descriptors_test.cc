// Tests of cudnn_descriptors.h on this machine's cuDNN: building descriptors
// needs the library, no GPU and no driver. cuDNN's own output sizes must be
// PoolDesc's (stride, padding, trailing rows and columns dropped).
#include "worker/nn/cudnn_descriptors.h"

#include <cudnn.h>
#include <unistd.h>

#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/cuda_libs.h"

namespace downpour {
namespace {

void SkipWithoutCudnn() {
  if (access("/usr/local/cuda/lib64/libcudnn.so.9", R_OK) != 0) {
    GTEST_SKIP() << "no cuDNN 9 under /usr/local/cuda/lib64";
  }
  if (absl::Status s = LoadCudaLibraries(); !s.ok()) GTEST_SKIP() << s;
}

TEST(CudnnDescriptorsTest, PoolingOutputSizesAreThoseOfPoolDesc) {
  SkipWithoutCudnn();
  if (IsSkipped()) return;
  struct Case {
    int h, w, window, stride, pad;
  };
  for (const Case& c : {Case{5, 7, 2, 0, 0}, Case{7, 9, 3, 2, 1},
                        Case{8, 8, 3, 1, 1}, Case{2, 2, 2, 0, 1},
                        Case{11, 8, 4, 3, 2}}) {
    PoolDesc d;
    d.batch = 2;
    d.channels = 3;
    d.in_h = c.h;
    d.in_w = c.w;
    d.window = c.window;
    d.stride = c.stride;
    d.pad = c.pad;
    ASSERT_TRUE(ValidatePool(d, "test").ok());
    for (cudnnPoolingMode_t mode :
         {CUDNN_POOLING_MAX, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING}) {
      absl::StatusOr<std::unique_ptr<PoolDescriptors>> pd =
          PoolDescriptors::Create(d, mode);
      EXPECT_TRUE(pd.ok()) << c.h << "x" << c.w << " window " << c.window
                           << ": " << pd.status();
    }
  }
}

TEST(CudnnDescriptorsTest, BatchNormDescriptorsBuild) {
  SkipWithoutCudnn();
  if (IsSkipped()) return;
  for (int spatial : {1, 64}) {
    BatchNormDesc d;
    d.batch = 4;
    d.channels = 16;
    d.spatial = spatial;
    absl::StatusOr<std::unique_ptr<BatchNormDescriptors>> bd =
        BatchNormDescriptors::Create(d);
    EXPECT_TRUE(bd.ok()) << bd.status();
  }
}

cudnnMathType_t MathTypeOf(cudnnConvolutionDescriptor_t conv) {
  cudnnMathType_t m = CUDNN_DEFAULT_MATH;
  EXPECT_EQ(cudnnGetConvolutionMathType(conv, &m), CUDNN_STATUS_SUCCESS);
  return m;
}

// Rankings are asked for with the descriptor's own math type; a run sets the
// chosen entry's (with TF32 a ranking mixes FMA and tensor-op entries).
TEST(CudnnDescriptorsTest, ConvMathTypeIsTheRankingsThenTheChoices) {
  SkipWithoutCudnn();
  if (IsSkipped()) return;
  ConvDesc d;
  d.batch = 2;
  d.in_channels = 3;
  d.in_h = 8;
  d.in_w = 8;
  d.out_channels = 4;
  d.kernel_h = 3;
  d.kernel_w = 3;
  for (bool tf32 : {false, true}) {
    absl::StatusOr<std::unique_ptr<ConvDescriptors>> cd =
        ConvDescriptors::Create(d, tf32);
    ASSERT_TRUE(cd.ok()) << cd.status();
    const cudnnMathType_t ranking = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    EXPECT_EQ((*cd)->ranking_math_type(), static_cast<int>(ranking));
    EXPECT_EQ(MathTypeOf((*cd)->conv()), ranking);
    for (cudnnMathType_t chosen :
         {CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH,
          CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_DEFAULT_MATH}) {
      absl::StatusOr<cudnnConvolutionDescriptor_t> conv =
          (*cd)->WithMathType(static_cast<int>(chosen));
      ASSERT_TRUE(conv.ok()) << conv.status();
      EXPECT_EQ(*conv, (*cd)->conv());
      EXPECT_EQ(MathTypeOf(*conv), chosen);
    }
    ASSERT_TRUE((*cd)->WithMathType((*cd)->ranking_math_type()).ok());
    EXPECT_EQ(MathTypeOf((*cd)->conv()), ranking);
  }
}

}  // namespace
}  // namespace downpour
