#include "worker/nn/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

bool IsStickyCudaError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status CudaError(cudaError_t e, const char* expr) {
  // Resets the thread's last-error slot so that a later, unrelated
  // cudaGetLastError() does not report this error again. Sticky errors
  // (a faulted kernel) cannot be cleared: the context stays unusable.
  (void)cudaGetLastError();
  std::string msg = absl::StrCat(expr, " failed: ", cudaGetErrorName(e), " (",
                                 cudaGetErrorString(e), ")");
  if (IsStickyCudaError(e)) {
    absl::StrAppend(&msg,
                    "; this error may come from earlier asynchronous work and "
                    "leaves the device context unusable (restart the process)");
  }
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status CudnnError(cudnnStatus_t s, const char* expr) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string msg = absl::StrCat(expr, " failed: ", cudnnGetErrorString(s));
  if (detail[0] != '\0') {
    absl::StrAppend(&msg, " (last cuDNN message: ", detail, ")");
  }
  return absl::Status(CudnnStatusCode(s), msg);
}

absl::StatusCode CudnnStatusCode(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS:
      return absl::StatusCode::kOk;
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
      // The chosen engine's alignment requirement, not a bad call: another
      // algorithm may run on the same buffers.
      return absl::StatusCode::kUnimplemented;
    default:
      break;
  }
  if (s / 1000 * 1000 == CUDNN_STATUS_NOT_SUPPORTED) {
    return absl::StatusCode::kUnimplemented;
  }
  return absl::StatusCode::kInternal;
}

absl::Status CublasError(cublasStatus_t s, const char* expr) {
  std::string msg = absl::StrCat(expr, " failed: ", cublasGetStatusString(s));
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUBLAS_STATUS_NOT_INITIALIZED) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace downpour
