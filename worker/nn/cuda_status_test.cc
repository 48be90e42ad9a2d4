// Tests of the cuDNN status mapping of cuda_status.h (pure: no library, no
// GPU). A misaligned-pointer failure is an engine's alignment requirement:
// the convolution algorithm retry must try the next algorithm.
#include "worker/nn/cuda_status.h"

#include <cudnn.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/nn/conv_algo_choice.h"

namespace downpour {
namespace {

bool Retryable(cudnnStatus_t s) {
  return IsAlgoRetryable(absl::Status(CudnnStatusCode(s), "x"));
}

TEST(CudaStatusTest, CudnnCodes) {
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_SUCCESS), absl::StatusCode::kOk);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_NOT_SUPPORTED),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_NOT_SUPPORTED_SHAPE),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(
      CudnnStatusCode(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
      absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_BAD_PARAM),
            absl::StatusCode::kInternal);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
            absl::StatusCode::kInternal);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_EXECUTION_FAILED),
            absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, MisalignedPointerIsRetriedWithAnotherAlgorithm) {
  EXPECT_TRUE(Retryable(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER));
  EXPECT_TRUE(Retryable(CUDNN_STATUS_NOT_SUPPORTED));
  EXPECT_TRUE(Retryable(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED));
  EXPECT_FALSE(Retryable(CUDNN_STATUS_BAD_PARAM));
  EXPECT_FALSE(Retryable(CUDNN_STATUS_EXECUTION_FAILED));
}

}  // namespace
}  // namespace downpour
