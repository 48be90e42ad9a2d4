// File: worker/nn/cpu_reference_ops.h
//
// Plain loops over host memory for the pooling, batch-normalization and
// small elementwise operations of backend.h: the OpenBLAS backend (the
// reference the conformance suite compares every backend with) runs them,
// split over its worker threads by the ranges each function takes, and the
// oneDNN backend reuses the elementwise ones. Arguments are assumed checked
// (ValidatePool, ValidateBatchNorm, op_checks.h); contracts as in backend.h.
//
//   // Planes [0, batch * channels) on one thread:
//   cpu_ops::MaxPoolForward(d, x, y, 0, int64_t{d.batch} * d.channels);
//
// Batch-norm statistics are summed in double precision, so the reference is
// accurate to float rounding whatever the batch size.
//
// Thread-safety: the functions keep no state; calls on disjoint ranges of
// the same tensors may run concurrently.
#ifndef DOWNPOUR_WORKER_NN_CPU_REFERENCE_OPS_H_
#define DOWNPOUR_WORKER_NN_CPU_REFERENCE_OPS_H_

#include <cstdint>

#include "worker/nn/backend.h"

namespace downpour {
namespace cpu_ops {

// ---- Pooling, over the NCHW planes [begin, end) (plane = n * C + c) --------

// y = the maximum of each window's cells inside the image.
void MaxPoolForward(const PoolDesc& d, const float* x, float* y, int64_t begin,
                    int64_t end);
// dx (overwritten) = the sum of dy over the windows whose first maximum
// (row-major order, strict >, recomputed from x) is the cell.
void MaxPoolBackward(const PoolDesc& d, const float* x, const float* dy,
                     float* dx, int64_t begin, int64_t end);
// y = the sum of each window's cells inside the image / window^2.
void AvgPoolForward(const PoolDesc& d, const float* x, float* y, int64_t begin,
                    int64_t end);
// dx (overwritten) = the sum of dy / window^2 over the windows that hold the
// cell.
void AvgPoolBackward(const PoolDesc& d, const float* dy, float* dx,
                     int64_t begin, int64_t end);

// ---- Batch normalization, over the channels [c_begin, c_end) ---------------

void BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                              const float* gamma, const float* beta,
                              float momentum, float* running_mean,
                              float* running_var, float* y, float* save_mean,
                              float* save_invstd, int c_begin, int c_end);
void BatchNormForwardInference(const BatchNormDesc& d, const float* x,
                               const float* gamma, const float* beta,
                               const float* running_mean,
                               const float* running_var, float* y, int c_begin,
                               int c_end);
void BatchNormBackward(const BatchNormDesc& d, const float* x, const float* dy,
                       const float* gamma, const float* save_mean,
                       const float* save_invstd, float* dx, float* dgamma,
                       float* dbeta, int c_begin, int c_end);

// ---- Elementwise, over the elements [begin, end) ----------------------------

// mask[i] = DropoutUniform(seed, i) < rate ? 0 : DropoutScale(rate).
void DropoutMask(float rate, uint64_t seed, float* mask, int64_t begin,
                 int64_t end);
// y[i] = a[i] * b[i].
void Multiply(const float* a, const float* b, float* y, int64_t begin,
              int64_t end);

// Backend::CopyRows (all rows).
void CopyRows(int64_t rows, int64_t cols, const float* src, int64_t src_stride,
              float* dst, int64_t dst_stride);

}  // namespace cpu_ops
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CPU_REFERENCE_OPS_H_
