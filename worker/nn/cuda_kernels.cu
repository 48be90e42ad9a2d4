// File: worker/nn/cuda_kernels.cu
//
// The CUDA backend's custom kernels (see cuda_kernels.h for the contracts).
// Compiled by nvcc in the //worker/nn:cuda_kernels_obj genrule, without
// --use_fast_math: expf/exp/log here are the accurate versions, so results
// stay within float rounding of the CPU backend.
//
// Elementwise kernels use grid-stride loops over int64_t indices, so any n
// works with a bounded grid. Reductions (ColumnSum, ChannelSum,
// SoftmaxCrossEntropy) use a fixed summation order (no atomics on floats),
// so they are deterministic.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "worker/nn/channel_sum_slices.h"
#include "worker/nn/cuda_kernels.h"

namespace downpour {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover the rest; 65535 blocks of 256 threads is far more
// than enough to fill an H100 (132 SMs x 2048 threads).
constexpr int64_t kMaxBlocks = 65535;
constexpr unsigned kFullMask = 0xffffffffu;

int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalStride() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) x[i] = value;
}

__global__ void ReluForwardKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    const float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx,
                                   int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    dx[i] = y[i] > 0.f ? dy[i] : 0.f;
  }
}

__global__ void AddRowBiasKernel(int64_t n, int cols, const float* bias,
                                 float* y) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    y[i] += bias[i % cols];
  }
}

// Block (32, 8): threadIdx.x picks a column of this block's 32, threadIdx.y
// one of 8 row phases; the 8 partial sums are added in a fixed order.
constexpr int kColSumRows = 8;
__global__ void __launch_bounds__(32 * kColSumRows)
    ColumnSumKernel(int rows, int cols, const float* dy, float* db) {
  __shared__ float part[kColSumRows][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kColSumRows) {
      sum += dy[static_cast<int64_t>(r) * cols + c];
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.f;
    for (int k = 0; k < kColSumRows; ++k) total += part[k][threadIdx.x];
    db[c] = total;
  }
}

// ChannelSum's first pass. Block (c, p) sums channel c of images
// [p * per, min(batch, (p + 1) * per)): each thread walks that slice's
// elements with a stride of the block size, then the warps' sums are added
// in warp order. Slices hold at most INT_MAX elements (channel_sum_slices.h).
constexpr int kChanThreads = 256;
__global__ void __launch_bounds__(kChanThreads)
    ChannelPartialSumKernel(int batch, int channels, int hw, int per,
                            const float* dy, float* partial) {
  __shared__ float warp_sum[kChanThreads / 32];
  const int c = blockIdx.x;
  const int p = blockIdx.y;
  const int n0 = p * per;
  const int n1 = n0 + per < batch ? n0 + per : batch;
  float sum = 0.f;
  if (n0 < n1) {
    const unsigned count = static_cast<unsigned>(n1 - n0) * hw;
    const unsigned uhw = static_cast<unsigned>(hw);
    for (unsigned k = threadIdx.x; k < count; k += kChanThreads) {
      const unsigned image = k / uhw;
      const unsigned i = k - image * uhw;
      sum += dy[(static_cast<int64_t>(n0 + image) * channels + c) * hw + i];
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    sum += __shfl_down_sync(kFullMask, sum, offset);
  }
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kChanThreads / 32; ++w) total += warp_sum[w];
    partial[static_cast<int64_t>(p) * channels + c] = total;
  }
}

// ChannelSum's second pass: db[c] = the slices' sums in slice order.
__global__ void ChannelFinishKernel(int channels, int parts,
                                    const float* partial, float* db) {
  for (int64_t c = GlobalIndex(); c < channels; c += GlobalStride()) {
    float total = 0.f;
    for (int p = 0; p < parts; ++p) {
      total += partial[static_cast<int64_t>(p) * channels + c];
    }
    db[c] = total;
  }
}

// The windows (rows [*lo, *hi) of outputs) whose input span
// o * stride - pad + [0, window) holds input index i, clipped to [0, out).
__device__ __forceinline__ void Covering(int i, int window, int stride,
                                         int pad, int out, int* lo, int* hi) {
  const int t = i + pad - window + 1;  // o * stride >= t.
  *lo = t <= 0 ? 0 : (t + stride - 1) / stride;
  const int last = (i + pad) / stride;  // o * stride <= i + pad.
  *hi = last + 1 < out ? last + 1 : out;
}

// One thread per element of dx (a gather: no atomics, no separate zeroing).
// A window's argmax is recomputed by every cell it covers: windows are
// small, and this keeps the sum order fixed (windows in row-major order).
__global__ void MaxPoolBackwardKernel(PoolGeometry g, int64_t total,
                                      const float* x, const float* dy,
                                      float* dx) {
  for (int64_t i = GlobalIndex(); i < total; i += GlobalStride()) {
    const int w = static_cast<int>(i % g.in_w);
    const int64_t t = i / g.in_w;
    const int h = static_cast<int>(t % g.in_h);
    const int64_t plane = t / g.in_h;
    const float* xp = x + plane * g.in_h * g.in_w;
    const float* dyp = dy + plane * g.out_h * g.out_w;
    int oh0, oh1, ow0, ow1;
    Covering(h, g.window, g.stride, g.pad, g.out_h, &oh0, &oh1);
    Covering(w, g.window, g.stride, g.pad, g.out_w, &ow0, &ow1);
    float sum = 0.f;
    for (int oh = oh0; oh < oh1; ++oh) {
      const int hs = oh * g.stride - g.pad;
      const int h0 = hs > 0 ? hs : 0;
      const int h1 = hs + g.window < g.in_h ? hs + g.window : g.in_h;
      for (int ow = ow0; ow < ow1; ++ow) {
        const int ws = ow * g.stride - g.pad;
        const int w0 = ws > 0 ? ws : 0;
        const int w1 = ws + g.window < g.in_w ? ws + g.window : g.in_w;
        int best_h = h0, best_w = w0;
        float best = xp[static_cast<int64_t>(h0) * g.in_w + w0];
        for (int a = h0; a < h1; ++a) {
          const float* row = xp + static_cast<int64_t>(a) * g.in_w;
          for (int b = w0; b < w1; ++b) {
            if (row[b] > best) {
              best = row[b];
              best_h = a;
              best_w = b;
            }
          }
        }
        if (best_h == h && best_w == w) {
          sum += dyp[static_cast<int64_t>(oh) * g.out_w + ow];
        }
      }
    }
    dx[i] = sum;
  }
}

__global__ void AvgPoolBackwardKernel(PoolGeometry g, int64_t total,
                                      float inv_area, const float* dy,
                                      float* dx) {
  for (int64_t i = GlobalIndex(); i < total; i += GlobalStride()) {
    const int w = static_cast<int>(i % g.in_w);
    const int64_t t = i / g.in_w;
    const int h = static_cast<int>(t % g.in_h);
    const int64_t plane = t / g.in_h;
    const float* dyp = dy + plane * g.out_h * g.out_w;
    int oh0, oh1, ow0, ow1;
    Covering(h, g.window, g.stride, g.pad, g.out_h, &oh0, &oh1);
    Covering(w, g.window, g.stride, g.pad, g.out_w, &ow0, &ow1);
    float sum = 0.f;
    for (int oh = oh0; oh < oh1; ++oh) {
      for (int ow = ow0; ow < ow1; ++ow) {
        sum += dyp[static_cast<int64_t>(oh) * g.out_w + ow] * inv_area;
      }
    }
    dx[i] = sum;
  }
}

// backend.cc's DropoutUniform, operation for operation.
__device__ __forceinline__ float DropoutUniformDevice(uint64_t seed,
                                                      uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * 0x1.0p-24f;
}

__global__ void DropoutMaskKernel(int64_t n, float rate, float keep,
                                  uint64_t seed, float* mask) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    mask[i] = DropoutUniformDevice(seed, static_cast<uint64_t>(i)) < rate
                  ? 0.f
                  : keep;
  }
}

__global__ void MultiplyKernel(int64_t n, const float* a, const float* b,
                               float* y) {
  for (int64_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    y[i] = a[i] * b[i];
  }
}

// One block; warp k handles rows k, k + warps, ... so a row's classes are
// spread over the 32 lanes. Per-warp partial losses and counts are added by
// thread 0 in warp order.
constexpr int kXentThreads = 512;
__global__ void __launch_bounds__(kXentThreads)
    SoftmaxXentKernel(int batch, int classes, const float* logits,
                      const float* labels, float label_smoothing,
                      float* dlogits, SoftmaxXentResult* result) {
  __shared__ double warp_loss[kXentThreads / 32];
  __shared__ long long warp_correct[kXentThreads / 32];
  __shared__ int bad_row;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  if (threadIdx.x == 0) bad_row = INT_MAX;
  __syncthreads();

  const float inv_batch = 1.f / static_cast<float>(batch);
  // The smoothed target: on at the label, off elsewhere (as the CPU backend).
  const double eps = label_smoothing;
  const float off = static_cast<float>(eps / classes);
  const float on = static_cast<float>(1.0 - eps + eps / classes);
  double loss = 0.0;      // Meaningful in lane 0.
  long long correct = 0;  // Meaningful in lane 0.
  for (int r = warp; r < batch; r += warps) {
    const float* z = logits + static_cast<int64_t>(r) * classes;
    const float label_f = labels[r];
    // The CPU backend's validity rule (NaN fails the first comparison).
    const bool valid = label_f >= 0.f &&
                       label_f < static_cast<float>(classes) &&
                       label_f == floorf(label_f);
    if (!valid) {  // Uniform across the warp.
      if (lane == 0) atomicMin(&bad_row, r);
      continue;
    }
    const int label = static_cast<int>(label_f);

    // First maximum: each lane scans its classes in increasing order, then
    // the lanes agree on (largest value, lowest index).
    float m = 0.f;
    int arg = INT_MAX;  // INT_MAX: this lane saw no class.
    for (int c = lane; c < classes; c += 32) {
      const float v = z[c];
      if (arg == INT_MAX || v > m) {
        m = v;
        arg = c;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float om = __shfl_xor_sync(kFullMask, m, offset);
      const int oa = __shfl_xor_sync(kFullMask, arg, offset);
      if (oa != INT_MAX &&
          (arg == INT_MAX || om > m || (om == m && oa < arg))) {
        m = om;
        arg = oa;
      }
    }
    // With NaN logits lanes could disagree; lane 0 decides.
    m = __shfl_sync(kFullMask, m, 0);
    arg = __shfl_sync(kFullMask, arg, 0);

    double sum = 0.0, zsum = 0.0;
    for (int c = lane; c < classes; c += 32) {
      sum += exp(static_cast<double>(z[c] - m));
      zsum += static_cast<double>(z[c] - m);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      sum += __shfl_xor_sync(kFullMask, sum, offset);
      zsum += __shfl_xor_sync(kFullMask, zsum, offset);
    }
    sum = __shfl_sync(kFullMask, sum, 0);
    zsum = __shfl_sync(kFullMask, zsum, 0);

    if (lane == 0) {
      loss += log(sum) - (1.0 - eps) * static_cast<double>(z[label] - m) -
              eps * zsum / classes;
      if (arg == label) ++correct;
    }
    if (dlogits != nullptr) {
      float* g = dlogits + static_cast<int64_t>(r) * classes;
      const float inv_sum = static_cast<float>(1.0 / sum);
      for (int c = lane; c < classes; c += 32) {
        const float target = c == label ? on : off;
        g[c] = expf(z[c] - m) * inv_sum * inv_batch - target * inv_batch;
      }
    }
  }

  if (lane == 0) {
    warp_loss[warp] = loss;
    warp_correct[warp] = correct;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total_loss = 0.0;
    long long total_correct = 0;
    for (int w = 0; w < warps; ++w) {
      total_loss += warp_loss[w];
      total_correct += warp_correct[w];
    }
    result->loss_sum = total_loss;
    result->correct = total_correct;
    const int br = bad_row == INT_MAX ? -1 : bad_row;
    result->bad_row = br;
    result->bad_label = br >= 0 ? labels[br] : 0.f;
  }
}

}  // namespace

cudaError_t CheckKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, FillKernel);
}

cudaError_t Fill(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, value);
  return cudaGetLastError();
}

cudaError_t ReluForward(const float* x, float* y, int64_t n,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ReluForwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* y, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t AddRowBias(int rows, int cols, const float* bias, float* y,
                       cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  AddRowBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t ColumnSum(int rows, int cols, const float* dy, float* db,
                      cudaStream_t stream) {
  // rows == 0 still runs: db must become zeros.
  if (cols <= 0 || rows < 0) return cudaSuccess;
  const dim3 block(32, kColSumRows);
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32));
  ColumnSumKernel<<<grid, block, 0, stream>>>(rows, cols, dy, db);
  return cudaGetLastError();
}

int64_t ChannelSumScratchFloats(int batch, int channels, int64_t hw) {
  if (channels <= 0) return 0;
  return static_cast<int64_t>(PlanChannelSum(batch, hw).parts) * channels;
}

cudaError_t ChannelSum(int batch, int channels, int64_t hw, const float* dy,
                       float* db, float* scratch, cudaStream_t stream) {
  if (channels <= 0 || batch < 0 || hw < 0) return cudaSuccess;
  if (batch == 0 || hw == 0) return Fill(db, channels, 0.f, stream);
  const ChannelSumSlices s = PlanChannelSum(batch, hw);
  if (s.parts <= 0) return cudaErrorInvalidValue;  // hw > INT_MAX.
  const dim3 grid(static_cast<unsigned>(channels),
                  static_cast<unsigned>(s.parts));
  ChannelPartialSumKernel<<<grid, kChanThreads, 0, stream>>>(
      batch, channels, static_cast<int>(hw), s.per, dy, scratch);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  ChannelFinishKernel<<<BlocksFor(channels), kThreads, 0, stream>>>(
      channels, s.parts, scratch, db);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(const PoolGeometry& g, const float* x,
                            const float* dy, float* dx, cudaStream_t stream) {
  const int64_t total = g.planes * g.in_h * g.in_w;
  if (total <= 0 || g.window <= 0 || g.stride <= 0) return cudaSuccess;
  MaxPoolBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, total, x,
                                                                   dy, dx);
  return cudaGetLastError();
}

cudaError_t AvgPoolBackward(const PoolGeometry& g, const float* dy, float* dx,
                            cudaStream_t stream) {
  const int64_t total = g.planes * g.in_h * g.in_w;
  if (total <= 0 || g.window <= 0 || g.stride <= 0) return cudaSuccess;
  // The CPU backend's 1 / window^2, rounded the same way.
  const float inv_area = 1.f / static_cast<float>(g.window * g.window);
  AvgPoolBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      g, total, inv_area, dy, dx);
  return cudaGetLastError();
}

cudaError_t DropoutMask(int64_t n, float rate, float keep, uint64_t seed,
                        float* mask, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  DropoutMaskKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, rate, keep, seed,
                                                           mask);
  return cudaGetLastError();
}

cudaError_t Multiply(int64_t n, const float* a, const float* b, float* y,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  MultiplyKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, a, b, y);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                const float* labels, float label_smoothing,
                                float* dlogits, SoftmaxXentResult* result,
                                cudaStream_t stream) {
  if (batch <= 0 || classes <= 0) return cudaErrorInvalidValue;
  SoftmaxXentKernel<<<1, kXentThreads, 0, stream>>>(
      batch, classes, logits, labels, label_smoothing, dlogits, result);
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace downpour
