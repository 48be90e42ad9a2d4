// File: worker/nn/op_checks.h
//
// The argument checks of the Backend operations that take no descriptor
// (backend.h has those of the descriptors: ValidatePool, ValidateBatchNorm,
// ...). Every backend applies them before touching memory, so a bad call
// fails the same way (InvalidArgument naming the operation) on each.
//
//   DP_RETURN_IF_ERROR(CheckDropoutMask(n, rate));
#ifndef DOWNPOUR_WORKER_NN_OP_CHECKS_H_
#define DOWNPOUR_WORKER_NN_OP_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/nn/backend.h"

namespace downpour {

// n >= 0 for the elementwise operation `op`.
absl::Status CheckSize(int64_t n, const char* op);

// n >= 0 and 0 <= rate < 1.
absl::Status CheckDropoutMask(int64_t n, float rate);

// rows, cols >= 0 and, when there is more than one row, strides >= cols
// (so the rows of each side do not overlap each other).
absl::Status CheckCopyRows(int64_t rows, int64_t cols, int64_t src_stride,
                           int64_t dst_stride);

// ValidateBatchNorm, and batch * spatial > 1: the training forward divides
// by it minus one for the running variance (PyTorch rejects it too).
absl::Status CheckBatchNormTraining(const BatchNormDesc& d, float momentum);

// 1 / (1 - rate), the kept elements' value in a dropout mask, computed once
// on the host so that every backend writes the same float.
float DropoutScale(float rate);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_OP_CHECKS_H_
