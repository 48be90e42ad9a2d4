// File: worker/nn/cuda_kernels.h
//
// Internal to the CUDA backend (//worker/nn:cuda_backend): host-side
// launchers of the custom kernels in cuda_kernels.cu. The .cu file is compiled
// by nvcc; this header is plain C++ so that g++-compiled code can call the
// launchers. Everything cuDNN or cuBLAS does (convolutions, pooling forward,
// batch normalization, GEMM, AXPY) is not here.
//
// Every launcher enqueues its work on `stream` and returns at once with the
// launch status (cudaGetLastError() after the launch, which also clears a
// non-sticky launch error); an empty problem (n == 0, rows == 0, ...) launches
// nothing and returns cudaSuccess. Pointers are device memory unless noted.
// Element counts are int64_t; matrix dimensions follow backend.h (int).
#ifndef DOWNPOUR_WORKER_NN_CUDA_KERNELS_H_
#define DOWNPOUR_WORKER_NN_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace downpour {
namespace cuda_kernels {

// cudaSuccess when the current device can run these kernels (the binary
// holds code for its architecture), else e.g. cudaErrorNoKernelImageForDevice.
// Does not clear the error.
cudaError_t CheckKernelImage();

// x[i] = value for i < n.
cudaError_t Fill(float* x, int64_t n, float value, cudaStream_t stream);

// y[i] = x[i] > 0 ? x[i] : 0.
cudaError_t ReluForward(const float* x, float* y, int64_t n,
                        cudaStream_t stream);
// dx[i] = y[i] > 0 ? dy[i] : 0 (exactly the CPU backend's rule, also at
// y == 0 and for NaN).
cudaError_t ReluBackward(const float* y, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream);

// y[r, c] += bias[c] (row-major rows x cols).
cudaError_t AddRowBias(int rows, int cols, const float* bias, float* y,
                       cudaStream_t stream);
// db[c] = sum_r dy[r, c] (overwrites db). Deterministic: the summation order
// depends only on rows and cols.
cudaError_t ColumnSum(int rows, int cols, const float* dy, float* db,
                      cudaStream_t stream);

// db[c] = sum over n and i of dy[(n * channels + c) * hw + i] (NCHW, hw =
// H * W; overwrites db): a convolution's bias gradient. Two passes in a
// fixed order, so deterministic: blocks sum slices of the batch into
// `scratch`, then one thread per channel adds its slices in order
// (channel_sum_slices.h: the slicing depends on the shape alone); `scratch`
// holds at least ChannelSumScratchFloats(batch, channels, hw) floats.
// batch == 0 writes zeros; hw > INT_MAX is cudaErrorInvalidValue.
int64_t ChannelSumScratchFloats(int batch, int channels, int64_t hw);
cudaError_t ChannelSum(int batch, int channels, int64_t hw, const float* dy,
                       float* db, float* scratch, cudaStream_t stream);

// The geometry of a pooling over NCHW planes (planes = batch * channels) of
// in_h x in_w: square `window`, `stride`, zero `pad` on every side, out_h x
// out_w outputs (PoolDesc's; trailing rows/columns that do not fill a window
// dropped).
struct PoolGeometry {
  int64_t planes;
  int in_h, in_w, window, stride, pad, out_h, out_w;
};

// Max pooling backward. Every element of dx is written: the sum of dy over
// the windows whose first maximum (row-major order over the window's cells
// inside the image, strict >, recomputed from x) it is, else 0; the sum runs
// over the windows in row-major order, as the CPU backend's.
cudaError_t MaxPoolBackward(const PoolGeometry& g, const float* x,
                            const float* dy, float* dx, cudaStream_t stream);
// Average pooling backward (count_include_pad): every element of dx is
// written, the sum of dy / window^2 over the windows that hold it.
cudaError_t AvgPoolBackward(const PoolGeometry& g, const float* dy, float* dx,
                            cudaStream_t stream);

// mask[i] = DropoutUniform(seed, i) < rate ? 0 : keep (backend.h's hash,
// computed bit for bit as on the host; keep = DropoutScale(rate)).
cudaError_t DropoutMask(int64_t n, float rate, float keep, uint64_t seed,
                        float* mask, cudaStream_t stream);
// y[i] = a[i] * b[i]; y may be a or b.
cudaError_t Multiply(int64_t n, const float* a, const float* b, float* y,
                     cudaStream_t stream);

// What SoftmaxCrossEntropy reduces on the device. Plain data shared by nvcc-
// and g++-compiled code (same host ABI).
struct SoftmaxXentResult {
  double loss_sum;    // Sum over valid rows of -sum_c q_c log softmax_c
                      // (Backend::SoftmaxCrossEntropy's smoothed target q).
  long long correct;  // Valid rows whose first argmax equals the label.
  int bad_row;        // Lowest row whose label is not a class index, or -1.
  float bad_label;    // labels[bad_row] when bad_row >= 0.
};

// Softmax cross-entropy over `batch` rows of `classes` logits with class
// indices stored as floats in `labels`. Writes *result (device memory) and,
// when dlogits is not null, dlogits = (softmax - onehot) / batch for every
// row with a valid label (rows with an invalid label are left as they were).
// One thread block; the reduction order is fixed, so results are
// deterministic.
cudaError_t SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                const float* labels, float label_smoothing,
                                float* dlogits, SoftmaxXentResult* result,
                                cudaStream_t stream);

}  // namespace cuda_kernels
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_CUDA_KERNELS_H_
