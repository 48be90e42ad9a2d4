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

}  // namespace
}  // namespace downpour
