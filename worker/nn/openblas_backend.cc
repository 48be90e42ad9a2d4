// File: worker/nn/openblas_backend.cc (see openblas_backend.h).
//
// Convolutions run one image at a time: the image's im2col matrix
// [C*KH*KW, OH*OW] stays in cache and the GEMM reads and writes NCHW memory
// directly (no transposes). The im2col scratch is kept by the backend and
// reused (it only grows), so steady-state training does no heap allocation.
//
// Parallelism: the backend owns a small worker pool (NewOpenblasBackend's
// num_threads) and splits convolutions by image, pooling by plane, batch
// normalization by channel (the loops of cpu_reference_ops.h), elementwise
// ops by range and large GEMMs by output rows; each piece calls
// single-threaded OpenBLAS.
#include "worker/nn/openblas_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/nn/backend.h"
#include "worker/nn/cpu_reference_ops.h"
#include "worker/nn/op_checks.h"

namespace downpour {
namespace {

constexpr size_t kAlignment = 64;

// 64-byte aligned, zero-filled allocation of n floats (n may be 0).
float* AlignedZeroAlloc(int64_t n) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

// Grow-only scratch buffer. Contents are unspecified between uses.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }

  float* data() const { return data_; }

  // Returns at least n floats, or null if allocation failed.
  float* Get(int64_t n) {
    if (n > capacity_) {
      std::free(data_);
      data_ = AlignedZeroAlloc(n);
      capacity_ = data_ == nullptr ? 0 : n;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

// Range [lo, hi) of output columns ow whose input column ow*stride - pad + j
// lies inside [0, w), for stride 1.
inline void ValidRange(int out_w, int w, int pad, int j, int* lo, int* hi) {
  *lo = std::min(out_w, std::max(0, pad - j));
  *hi = std::max(*lo, std::min(out_w, w + pad - j));
}

// col[(c*KH + i)*KW + j][oh*OW + ow] = x[c][oh*s - pad + i][ow*s - pad + j]
// (0 outside the image), for one image x.
void Im2Col(const ConvDesc& d, const float* x, float* col) {
  const int oh_n = d.OutH(), ow_n = d.OutW();
  const int64_t plane = int64_t{d.in_h} * d.in_w;
  float* out = col;
  for (int c = 0; c < d.in_channels; ++c) {
    const float* xc = x + c * plane;
    for (int i = 0; i < d.kernel_h; ++i) {
      for (int j = 0; j < d.kernel_w; ++j) {
        int lo = 0, hi = 0;
        if (d.stride == 1) ValidRange(ow_n, d.in_w, d.pad, j, &lo, &hi);
        for (int oh = 0; oh < oh_n; ++oh, out += ow_n) {
          const int ih = oh * d.stride - d.pad + i;
          if (ih < 0 || ih >= d.in_h) {
            std::memset(out, 0, sizeof(float) * ow_n);
            continue;
          }
          const float* xr = xc + int64_t{ih} * d.in_w;
          if (d.stride == 1) {
            // Rows are short (OW floats): a plain loop beats memcpy calls.
            const float* src = xr + (lo - d.pad + j);
            for (int ow = 0; ow < lo; ++ow) out[ow] = 0.f;
            for (int ow = lo; ow < hi; ++ow) out[ow] = src[ow - lo];
            for (int ow = hi; ow < ow_n; ++ow) out[ow] = 0.f;
          } else {
            for (int ow = 0; ow < ow_n; ++ow) {
              const int iw = ow * d.stride - d.pad + j;
              out[ow] = (iw >= 0 && iw < d.in_w) ? xr[iw] : 0.f;
            }
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col for one image: dx (zeroed here) accumulates every
// column entry at the input position it was copied from.
void Col2Im(const ConvDesc& d, const float* col, float* dx) {
  const int oh_n = d.OutH(), ow_n = d.OutW();
  const int64_t plane = int64_t{d.in_h} * d.in_w;
  std::memset(dx, 0, sizeof(float) * plane * d.in_channels);
  const float* in = col;
  for (int c = 0; c < d.in_channels; ++c) {
    float* xc = dx + c * plane;
    for (int i = 0; i < d.kernel_h; ++i) {
      for (int j = 0; j < d.kernel_w; ++j) {
        int lo = 0, hi = 0;
        if (d.stride == 1) ValidRange(ow_n, d.in_w, d.pad, j, &lo, &hi);
        for (int oh = 0; oh < oh_n; ++oh, in += ow_n) {
          const int ih = oh * d.stride - d.pad + i;
          if (ih < 0 || ih >= d.in_h) continue;
          float* xr = xc + int64_t{ih} * d.in_w;
          if (d.stride == 1) {
            float* dst = xr + (lo - d.pad + j);
            for (int ow = lo; ow < hi; ++ow) dst[ow - lo] += in[ow];
          } else {
            for (int ow = 0; ow < ow_n; ++ow) {
              const int iw = ow * d.stride - d.pad + j;
              if (iw >= 0 && iw < d.in_w) xr[iw] += in[ow];
            }
          }
        }
      }
    }
  }
}

// Sum of n floats with eight independent partial sums, so the loop
// vectorizes without -ffast-math (a single accumulator is latency-bound).
float Sum(const float* v, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += v[i + l];
  }
  float sum = 0.f;
  for (; i < n; ++i) sum += v[i];
  for (int l = 0; l < 8; ++l) sum += acc[l];
  return sum;
}

// A fixed set of helper threads that, together with the calling thread,
// run one data-parallel loop at a time. Used by a single caller thread (the
// Backend's); ParallelFor blocks until every block is done. Threads are joined
// in the destructor.
class WorkerPool {
 public:
  // `num_threads` counts the caller, so 1 means no helper threads.
  explicit WorkerPool(int num_threads) : size_(std::max(1, num_threads)) {
    for (int w = 1; w < size_; ++w)
      helpers_.emplace_back([this, w] { Run(w); });
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    for (std::thread& t : helpers_) t.join();
  }

  int size() const { return size_; }

  // Splits [0, n) into size() contiguous blocks (some possibly empty) and
  // calls fn(worker, begin, end) for each, worker in [0, size()).
  void ParallelFor(int64_t n,
                   absl::FunctionRef<void(int, int64_t, int64_t)> fn) {
    if (size_ == 1 || n <= 1) {
      fn(0, 0, n);
      return;
    }
    {
      absl::MutexLock l(&mu_);
      fn_ = &fn;
      n_ = n;
      pending_ = size_ - 1;
      ++generation_;
    }
    fn(0, 0, n / size_);
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
    fn_ = nullptr;
  }

 private:
  void Run(int w) {
    uint64_t seen = 0;
    while (true) {
      const absl::FunctionRef<void(int, int64_t, int64_t)>* fn;
      int64_t n;
      {
        absl::MutexLock l(&mu_);
        // Runs under mu_ (absl::Condition is evaluated with the lock held).
        auto ready = [this, &seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return stop_ || generation_ != seen;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = generation_;
        fn = fn_;
        n = n_;
      }
      (*fn)(w, n * w / size_, n * (w + 1) / size_);
      absl::MutexLock l(&mu_);
      --pending_;
    }
  }

  const int size_;
  std::vector<std::thread> helpers_;
  absl::Mutex mu_;
  const absl::FunctionRef<void(int, int64_t, int64_t)>* fn_
      ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

class OpenblasBackend : public Backend {
 public:
  explicit OpenblasBackend(int num_threads)
      : pool_(num_threads), cols_(pool_.size()), parts_(pool_.size()) {}

  std::string Name() const override { return "cpu"; }

  absl::StatusOr<float*> Allocate(int64_t n) override {
    absl::Status s = ValidateAllocation(n);
    if (!s.ok()) return s;
    float* p = AlignedZeroAlloc(n);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: out of memory for ", n, " floats"));
    }
    return p;
  }

  void Free(float* p) override { std::free(p); }

  absl::Status CopyToDevice(const float* host_src, float* dst,
                            int64_t n) override {
    return Copy(host_src, dst, n, "CopyToDevice");
  }
  bool HostMemory() const override { return true; }
  absl::Status CopyToHost(const float* src, float* host_dst,
                          int64_t n) override {
    return Copy(src, host_dst, n, "CopyToHost");
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Copy(const float* src, float* dst, int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("Copy: negative size");
    if (n > 0 && src != dst) {
      std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status Fill(float* x, int64_t n, float value) override {
    if (n < 0) return absl::InvalidArgumentError("Fill: negative size");
    std::fill(x, x + n, value);
    return absl::OkStatus();
  }

  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError("Axpy: negative size");
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
    return absl::OkStatus();
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) override {
    if (absl::Status s = ValidateGemm(m, n, k); !s.ok()) return s;
    if (m == 0 || n == 0) return absl::OkStatus();
    const int lda = std::max(1, trans_a ? m : k);
    const int ldb = std::max(1, trans_b ? k : n);
    // Large products are split by rows of C over the workers (each block is
    // an independent single-threaded GEMM); op(A)'s rows r.. start at a + r
    // when A is transposed and at a + r * lda otherwise.
    constexpr double kMinParallelFlops = 1 << 20;
    const int64_t blocks = static_cast<double>(m) * n * k < kMinParallelFlops
                               ? 1
                               : std::min(m, pool_.size());
    pool_.ParallelFor(blocks, [&](int, int64_t b0, int64_t b1) {
      if (b0 == b1) return;
      const int r0 = static_cast<int>(m * b0 / blocks);
      const int r1 = static_cast<int>(m * b1 / blocks);
      const float* ar = a + (trans_a ? r0 : int64_t{r0} * lda);
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, r1 - r0, n, k, alpha, ar,
                  lda, b, ldb, beta, c + int64_t{r0} * n, n);
    });
    return absl::OkStatus();
  }

  absl::Status AddRowBias(int rows, int cols, const float* bias,
                          float* y) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("AddRowBias: negative dimension");
    }
    for (int r = 0; r < rows; ++r) {
      float* yr = y + int64_t{r} * cols;
      for (int c = 0; c < cols; ++c) yr[c] += bias[c];
    }
    return absl::OkStatus();
  }

  absl::Status ColumnSum(int rows, int cols, const float* dy,
                         float* db) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("ColumnSum: negative dimension");
    }
    std::fill(db, db + cols, 0.f);
    for (int r = 0; r < rows; ++r) {
      const float* dyr = dy + int64_t{r} * cols;
      for (int c = 0; c < cols; ++c) db[c] += dyr[c];
    }
    return absl::OkStatus();
  }

  absl::Status Conv2dForward(const ConvDesc& d, const float* x, const float* w,
                             const float* b, float* y) override {
    const absl::StatusOr<ConvGemm> g = PrepareConv(d, "Conv2dForward");
    if (!g.ok()) return g.status();
    const int p = g->p, k = g->k, o_n = g->o;
    pool_.ParallelFor(d.batch, [&](int worker, int64_t begin, int64_t end) {
      float* col = cols_[worker].data();
      for (int64_t n = begin; n < end; ++n) {
        float* yn = y + n * o_n * p;
        Im2Col(d, x + InputOffset(d, n), col);
        // y_n[O, P] = W[O, K] * col[K, P]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o_n, p, k, 1.f,
                    w, k, col, p, 0.f, yn, p);
        if (b != nullptr) {
          for (int o = 0; o < o_n; ++o) {
            float* row = yn + int64_t{o} * p;
            const float bias = b[o];
            for (int q = 0; q < p; ++q) row[q] += bias;
          }
        }
      }
    });
    return absl::OkStatus();
  }

  absl::Status Conv2dBackwardData(const ConvDesc& d, const float* w,
                                  const float* dy, float* dx) override {
    const absl::StatusOr<ConvGemm> g = PrepareConv(d, "Conv2dBackwardData");
    if (!g.ok()) return g.status();
    const int p = g->p, k = g->k, o_n = g->o;
    pool_.ParallelFor(d.batch, [&](int worker, int64_t begin, int64_t end) {
      float* col = cols_[worker].data();
      for (int64_t n = begin; n < end; ++n) {
        // col[K, P] = W^T[K, O] * dy_n[O, P]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, p, o_n, 1.f, w,
                    k, dy + n * o_n * p, p, 0.f, col, p);
        Col2Im(d, col, dx + InputOffset(d, n));
      }
    });
    return absl::OkStatus();
  }

  // Each worker accumulates its images into its own partial dW/db; the
  // partials are then summed in worker order (deterministic for a fixed
  // thread count).
  absl::Status Conv2dBackwardFilter(const ConvDesc& d, const float* x,
                                    const float* dy, float* dw,
                                    float* db) override {
    const absl::StatusOr<ConvGemm> g = PrepareConv(d, "Conv2dBackwardFilter");
    if (!g.ok()) return g.status();
    const int p = g->p, k = g->k, o_n = g->o;
    const int64_t wsize = int64_t{o_n} * k;
    const int64_t part_size = wsize + o_n;  // dW then db.
    for (Scratch& part : parts_) {
      if (part.Get(part_size) == nullptr) return OutOfScratch();
    }
    pool_.ParallelFor(d.batch, [&](int worker, int64_t begin, int64_t end) {
      float* col = cols_[worker].data();
      float* pdw = parts_[worker].data();
      float* pdb = pdw + wsize;
      std::fill(pdw, pdw + part_size, 0.f);
      for (int64_t n = begin; n < end; ++n) {
        const float* dyn = dy + n * o_n * p;
        Im2Col(d, x + InputOffset(d, n), col);
        // dW[O, K] += dy_n[O, P] * col^T[P, K]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, o_n, k, p, 1.f,
                    dyn, p, col, p, 1.f, pdw, k);
        for (int o = 0; o < o_n; ++o) pdb[o] += Sum(dyn + int64_t{o} * p, p);
      }
    });
    const int workers = d.batch == 0 ? 1 : pool_.size();
    std::copy(parts_[0].data(), parts_[0].data() + wsize, dw);
    if (db != nullptr)
      std::copy(parts_[0].data() + wsize, parts_[0].data() + part_size, db);
    for (int wk = 1; wk < workers; ++wk) {
      const float* part = parts_[wk].data();
      for (int64_t i = 0; i < wsize; ++i) dw[i] += part[i];
      if (db != nullptr) {
        for (int o = 0; o < o_n; ++o) db[o] += part[wsize + o];
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReluForward(int64_t n, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError("ReluForward: negative size");
    ParallelRange(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
    });
    return absl::OkStatus();
  }

  absl::Status ReluBackward(int64_t n, const float* y, const float* dy,
                            float* dx) override {
    if (n < 0) return absl::InvalidArgumentError("ReluBackward: negative size");
    ParallelRange(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
    });
    return absl::OkStatus();
  }

  // Pooling and batch normalization: cpu_reference_ops.h's loops, split by
  // plane or channel over the pool.
  absl::Status MaxPoolForward(const PoolDesc& d, const float* x,
                              float* y) override {
    DP_RETURN_IF_ERROR(ValidatePool(d, "MaxPoolForward"));
    ForPlanes(d, [&](int64_t b, int64_t e) {
      cpu_ops::MaxPoolForward(d, x, y, b, e);
    });
    return absl::OkStatus();
  }
  absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                               const float* /*y*/, const float* dy,
                               float* dx) override {
    DP_RETURN_IF_ERROR(ValidatePool(d, "MaxPoolBackward"));
    ForPlanes(d, [&](int64_t b, int64_t e) {
      cpu_ops::MaxPoolBackward(d, x, dy, dx, b, e);
    });
    return absl::OkStatus();
  }
  absl::Status AvgPoolForward(const PoolDesc& d, const float* x,
                              float* y) override {
    DP_RETURN_IF_ERROR(ValidatePool(d, "AvgPoolForward"));
    ForPlanes(d, [&](int64_t b, int64_t e) {
      cpu_ops::AvgPoolForward(d, x, y, b, e);
    });
    return absl::OkStatus();
  }
  absl::Status AvgPoolBackward(const PoolDesc& d, const float* dy,
                               float* dx) override {
    DP_RETURN_IF_ERROR(ValidatePool(d, "AvgPoolBackward"));
    ForPlanes(d, [&](int64_t b, int64_t e) {
      cpu_ops::AvgPoolBackward(d, dy, dx, b, e);
    });
    return absl::OkStatus();
  }
  absl::Status BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                                        const float* gamma, const float* beta,
                                        float momentum, float* running_mean,
                                        float* running_var, float* y,
                                        float* save_mean,
                                        float* save_invstd) override {
    DP_RETURN_IF_ERROR(CheckBatchNormTraining(d, momentum));
    ForChannels(d, [&](int c0, int c1) {
      cpu_ops::BatchNormForwardTraining(d, x, gamma, beta, momentum,
                                        running_mean, running_var, y,
                                        save_mean, save_invstd, c0, c1);
    });
    return absl::OkStatus();
  }
  absl::Status BatchNormForwardInference(const BatchNormDesc& d,
                                         const float* x, const float* gamma,
                                         const float* beta,
                                         const float* running_mean,
                                         const float* running_var,
                                         float* y) override {
    DP_RETURN_IF_ERROR(ValidateBatchNorm(d, "BatchNormForwardInference"));
    ForChannels(d, [&](int c0, int c1) {
      cpu_ops::BatchNormForwardInference(d, x, gamma, beta, running_mean,
                                         running_var, y, c0, c1);
    });
    return absl::OkStatus();
  }
  absl::Status BatchNormBackward(const BatchNormDesc& d, const float* x,
                                 const float* dy, const float* gamma,
                                 const float* save_mean,
                                 const float* save_invstd, float* dx,
                                 float* dgamma, float* dbeta) override {
    DP_RETURN_IF_ERROR(ValidateBatchNorm(d, "BatchNormBackward"));
    ForChannels(d, [&](int c0, int c1) {
      cpu_ops::BatchNormBackward(d, x, dy, gamma, save_mean, save_invstd, dx,
                                 dgamma, dbeta, c0, c1);
    });
    return absl::OkStatus();
  }

  absl::Status DropoutMask(int64_t n, float rate, uint64_t seed,
                           float* mask) override {
    DP_RETURN_IF_ERROR(CheckDropoutMask(n, rate));
    ParallelRange(n, [&](int64_t b, int64_t e) {
      cpu_ops::DropoutMask(rate, seed, mask, b, e);
    });
    return absl::OkStatus();
  }
  absl::Status Multiply(int64_t n, const float* a, const float* b,
                        float* y) override {
    DP_RETURN_IF_ERROR(CheckSize(n, "Multiply"));
    ParallelRange(n, [&](int64_t lo, int64_t hi) {
      cpu_ops::Multiply(a, b, y, lo, hi);
    });
    return absl::OkStatus();
  }
  absl::Status CopyRows(int64_t rows, int64_t cols, const float* src,
                        int64_t src_stride, float* dst,
                        int64_t dst_stride) override {
    DP_RETURN_IF_ERROR(CheckCopyRows(rows, cols, src_stride, dst_stride));
    cpu_ops::CopyRows(rows, cols, src, src_stride, dst, dst_stride);
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                   const float* labels, float label_smoothing,
                                   float* dlogits, float* host_loss,
                                   int64_t* host_correct) override {
    if (absl::Status s = ValidateSoftmaxShape(batch, classes); !s.ok()) {
      return s;
    }
    if (absl::Status s = ValidateLabelSmoothing(label_smoothing); !s.ok()) {
      return s;
    }
    for (int r = 0; r < batch; ++r) {
      const float l = labels[r];
      if (!(l >= 0.f && l < static_cast<float>(classes)) ||
          l != std::floor(l)) {
        return absl::InvalidArgumentError(
            absl::StrCat("SoftmaxCrossEntropy: label ", l, " of example ", r,
                         " is not a class index in [0, ", classes, ")"));
      }
    }
    double loss = 0;
    int64_t correct = 0;
    const float inv_batch = 1.f / static_cast<float>(batch);
    // Target q = on at the label, off elsewhere.
    const double eps = label_smoothing;
    const float off = static_cast<float>(eps / classes);
    const float on = static_cast<float>(1.0 - eps + eps / classes);
    for (int r = 0; r < batch; ++r) {
      const float* z = logits + int64_t{r} * classes;
      const int label = static_cast<int>(labels[r]);
      int argmax = 0;
      for (int c = 1; c < classes; ++c) {
        if (z[c] > z[argmax]) argmax = c;
      }
      const float zmax = z[argmax];
      double sum = 0, zsum = 0;
      for (int c = 0; c < classes; ++c) {
        sum += std::exp(double{z[c] - zmax});
        zsum += double{z[c] - zmax};
      }
      // -sum_c q_c log p_c = log(sum) - (1 - eps) z'_label - eps mean(z'),
      // z' = z - zmax.
      loss += std::log(sum) - (1.0 - eps) * double{z[label] - zmax} -
              eps * zsum / classes;
      if (argmax == label) ++correct;
      if (dlogits != nullptr) {
        float* g = dlogits + int64_t{r} * classes;
        const float inv_sum = static_cast<float>(1.0 / sum);
        // p inv_batch - q inv_batch: with eps = 0, bit for bit the plain
        // cross-entropy's gradient.
        for (int c = 0; c < classes; ++c) {
          g[c] = std::exp(z[c] - zmax) * inv_sum * inv_batch - off * inv_batch;
        }
        g[label] = std::exp(z[label] - zmax) * inv_sum * inv_batch -
                   on * inv_batch;
      }
    }
    if (host_loss != nullptr) *host_loss = static_cast<float>(loss / batch);
    if (host_correct != nullptr) *host_correct = correct;
    return absl::OkStatus();
  }

 private:
  static absl::Status Copy(const float* src, float* dst, int64_t n,
                           const char* op) {
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": negative size"));
    }
    if (n > 0 && src != dst) std::memcpy(dst, src, sizeof(float) * n);
    return absl::OkStatus();
  }

  static absl::Status OutOfScratch() {
    return absl::ResourceExhaustedError(
        "convolution: out of memory for scratch buffers");
  }

  // One image's lowered convolution is the GEMM y_n[O, P] = W[O, K] *
  // col[K, P].
  struct ConvGemm {
    int p, k, o;
  };
  // Validates `d` for `op` and makes every worker's column buffer hold
  // K x P floats.
  absl::StatusOr<ConvGemm> PrepareConv(const ConvDesc& d, const char* op) {
    absl::Status s = ValidateConv(d, op);
    if (!s.ok()) return s;
    const ConvGemm g{d.OutH() * d.OutW(),
                     d.in_channels * d.kernel_h * d.kernel_w, d.out_channels};
    if (!ReserveCols(int64_t{g.k} * g.p)) return OutOfScratch();
    return g;
  }

  static int64_t InputOffset(const ConvDesc& d, int64_t n) {
    return n * d.in_channels * d.in_h * d.in_w;
  }

  // Makes every worker's im2col scratch hold at least n floats.
  bool ReserveCols(int64_t n) {
    for (Scratch& c : cols_) {
      if (c.Get(n) == nullptr) return false;
    }
    return true;
  }

  // Elementwise loops are split only when large enough to pay for the
  // hand-off to the helper threads.
  template <typename F>
  void ParallelRange(int64_t n, F fn) {
    constexpr int64_t kMinParallel = int64_t{1} << 16;
    if (n < kMinParallel) {
      fn(int64_t{0}, n);
      return;
    }
    pool_.ParallelFor(n,
                      [&](int, int64_t begin, int64_t end) { fn(begin, end); });
  }
  template <typename F>
  void ForPlanes(const PoolDesc& d, F fn) {
    pool_.ParallelFor(int64_t{d.batch} * d.channels,
                      [&](int, int64_t begin, int64_t end) { fn(begin, end); });
  }
  template <typename F>
  void ForChannels(const BatchNormDesc& d, F fn) {
    pool_.ParallelFor(d.channels, [&](int, int64_t begin, int64_t end) {
      fn(static_cast<int>(begin), static_cast<int>(end));
    });
  }

  WorkerPool pool_;
  std::vector<Scratch> cols_;   // Per worker: one image's im2col matrix.
  std::vector<Scratch> parts_;  // Per worker: partial dW and db.
};

}  // namespace

std::unique_ptr<Backend> NewOpenblasBackend(int num_threads) {
  // OpenBLAS's own threads stay off while the backend's pool splits the work
  // (see openblas_backend.h).
  if (num_threads > 0) openblas_set_num_threads(1);
  return std::make_unique<OpenblasBackend>(std::max(1, num_threads));
}

}  // namespace downpour
