// File: worker/nn/op_checks.cc (see op_checks.h).
#include "worker/nn/op_checks.h"

#include "absl/strings/str_cat.h"

namespace downpour {

absl::Status CheckSize(int64_t n, const char* op) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative size ", n));
  }
  return absl::OkStatus();
}

absl::Status CheckDropoutMask(int64_t n, float rate) {
  if (n < 0 || !(rate >= 0.f && rate < 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DropoutMask: bad arguments (n=", n, " rate=", rate,
                     "); needs n >= 0 and 0 <= rate < 1"));
  }
  return absl::OkStatus();
}

absl::Status CheckCopyRows(int64_t rows, int64_t cols, int64_t src_stride,
                           int64_t dst_stride) {
  if (rows < 0 || cols < 0 ||
      (rows > 1 && (src_stride < cols || dst_stride < cols))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyRows: bad shape (rows=", rows, " cols=", cols,
        " src_stride=", src_stride, " dst_stride=", dst_stride, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatchNormTraining(const BatchNormDesc& d, float momentum) {
  absl::Status s = ValidateBatchNorm(d, "BatchNormForwardTraining");
  if (!s.ok()) return s;
  if (int64_t{d.batch} * d.spatial < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchNormForwardTraining: needs more than one value per channel "
        "(batch=",
        d.batch, " spatial=", d.spatial, ")"));
  }
  if (!(momentum >= 0.f && momentum <= 1.f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchNormForwardTraining: momentum ", momentum, " is not in [0, 1]"));
  }
  return absl::OkStatus();
}

float DropoutScale(float rate) { return 1.f / (1.f - rate); }

}  // namespace downpour
