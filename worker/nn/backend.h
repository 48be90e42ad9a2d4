// File: worker/nn/backend.h
//
// The compute-backend interface: every numerical operation a layer needs,
// over memory that the backend owns (host RAM for the CPU backends, device
// memory for a CUDA backend). Layers and the model are written only against
// this interface, so a new backend slots in without touching them.
//
// Implementations, each with its factory in a header of its own:
// openblas_backend.h (im2col + OpenBLAS GEMM), onednn_backend.h (oneDNN
// primitives, the default CPU backend) and cuda_backend.h (cuDNN, cuBLAS).
// backend_conformance_test.cc runs one test suite over all of them.
//
// Conventions:
//  * All tensors are float32, row-major. Images are NCHW; convolution
//    weights are OIHW; dense weights are [out, in] (PyTorch's layouts, so saved
//    parameters load directly into the equivalent torch.nn modules).
//  * Pointers passed to operations are backend memory from Allocate() unless
//    the parameter is named host_*.
//  * Operations may be asynchronous on a device; CopyToHost and Synchronize
//    wait for completion. CopyToHostAsync does not: WaitHostCopies does.
//  * A Backend is used by one thread at a time (one per worker replica),
//    except WaitHostCopies, which another thread may call meanwhile.
//    Devices are chosen by the caller (main) and passed in; library code
//    never picks one.
#ifndef DOWNPOUR_WORKER_NN_BACKEND_H_
#define DOWNPOUR_WORKER_NN_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/host_allocator.h"

namespace downpour {

// 2-D convolution of an NCHW batch with OIHW weights.
struct ConvDesc {
  int batch = 0;
  int in_channels = 0, in_h = 0, in_w = 0;
  int out_channels = 0;
  int kernel_h = 3, kernel_w = 3;
  int stride = 1;
  int pad = 0;
  int OutH() const { return (in_h + 2 * pad - kernel_h) / stride + 1; }
  int OutW() const { return (in_w + 2 * pad - kernel_w) / stride + 1; }
};

// Max or average pooling of an NCHW batch with a square `window`, a
// `stride` (0: the window, the default) and zero `pad` on every side, as
// PyTorch's MaxPool2d / AvgPool2d with ceil_mode false: trailing rows/cols
// that do not fill a window are dropped. Max pooling ignores padded cells;
// average pooling counts them as zeros (count_include_pad).
struct PoolDesc {
  int batch = 0;
  int channels = 0, in_h = 0, in_w = 0;
  int window = 2;
  int stride = 0;  // 0: equal to window.
  int pad = 0;     // At most window / 2, as PyTorch requires.
  int Stride() const { return stride > 0 ? stride : window; }
  int OutH() const { return (in_h + 2 * pad - window) / Stride() + 1; }
  int OutW() const { return (in_w + 2 * pad - window) / Stride() + 1; }
};

// Batch normalization over an NCHW batch (`spatial` = H * W; a dense layer's
// features are channels with spatial 1), per channel, as PyTorch's
// BatchNorm2d/1d: training normalizes with the batch mean and biased
// variance; the running statistics, when kept, move as
// running = (1 - momentum) * running + momentum * batch_statistic with the
// unbiased variance (as cuDNN's exponentialAverageFactor).
struct BatchNormDesc {
  int batch = 0;
  int channels = 0;
  int spatial = 1;
  float eps = 1e-5f;
  int64_t Size() const { return int64_t{batch} * channels * spatial; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" (OpenBLAS), "cpu (onednn)" or e.g. "cuda:0 (NVIDIA H100)".
  virtual std::string Name() const = 0;

  // ---- Memory -------------------------------------------------------------
  // Returns zero-initialized memory for n floats; release with Free.
  virtual absl::StatusOr<float*> Allocate(int64_t n) = 0;
  virtual void Free(float* p) = 0;
  virtual absl::Status CopyToDevice(const float* host_src, float* dst,
                                    int64_t n) = 0;
  virtual absl::Status CopyToHost(const float* src, float* host_dst,
                                  int64_t n) = 0;
  virtual absl::Status Synchronize() = 0;
  // Starts copying n floats of backend memory to the host once the work
  // queued so far has produced them, and returns without waiting: on a
  // device, on a second queue, so that the work queued next overlaps the
  // copy. Until WaitHostCopies() has returned, host_dst must not be read
  // and src must not be written: OrderAfterHostCopies() makes the work
  // queued after it wait (on the device) for the copies started before it.
  // Default (the CPU backends): CopyToHost, done on return.
  virtual absl::Status CopyToHostAsync(const float* src, float* host_dst,
                                       int64_t n) {
    return CopyToHost(src, host_dst, n);
  }
  // Waits for every CopyToHostAsync started so far. Safe to call from
  // another thread while the backend's own thread queues work.
  virtual absl::Status WaitHostCopies() { return absl::OkStatus(); }
  // The work queued from now on runs after the copies started so far,
  // without the host waiting.
  virtual absl::Status OrderAfterHostCopies() { return absl::OkStatus(); }
  // dst = src, n floats of backend memory (a device-to-device copy).
  // Default: Fill + Axpy; backends override it with a plain copy.
  virtual absl::Status Copy(const float* src, float* dst, int64_t n);
  // The caller no longer needs the values in [p, p + n) (backend memory):
  // until it writes them again, reading them gives unspecified values. Lets
  // a backend that keeps tensors in its own layout (the oneDNN one) drop
  // that layout instead of converting it when the buffer is reused for a
  // tensor of another shape. Default: nothing.
  virtual absl::Status Discard(float* p, int64_t n);
  // Where host buffers that feed CopyToDevice should come from: page-locked
  // memory on a GPU (the copy then runs asynchronously), ordinary memory on
  // the CPU. Owned by the backend; valid while it lives. Default:
  // DefaultHostAllocator().
  virtual HostAllocator* staging_allocator();
  // Whether backend memory is ordinary host memory, which another thread may
  // write while the backend does not use it (the CPU backends). A
  // CopyToDevice from a buffer onto itself then copies nothing and only
  // tells the backend its values were written (as plain floats: the oneDNN
  // backend keeps no layout of its own on memory it only reads, such as
  // parameters, so none is half overwritten). Default: false.
  virtual bool HostMemory() const { return false; }

  // ---- Elementwise --------------------------------------------------------
  virtual absl::Status Fill(float* x, int64_t n, float value) = 0;
  // y += alpha * x
  virtual absl::Status Axpy(int64_t n, float alpha, const float* x,
                            float* y) = 0;

  // ---- Dense --------------------------------------------------------------
  // C[m,n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k,
  // op(B) is k x n.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                            float alpha, const float* a, const float* b,
                            float beta, float* c) = 0;
  // y[r, c] += bias[c] for r < rows, c < cols.
  virtual absl::Status AddRowBias(int rows, int cols, const float* bias,
                                  float* y) = 0;
  // db[c] = sum_r dy[r, c]  (overwrites db).
  virtual absl::Status ColumnSum(int rows, int cols, const float* dy,
                                 float* db) = 0;

  // ---- Convolution (overwrite their outputs) ------------------------------
  // y = conv(x, w) + b (b may be null).
  virtual absl::Status Conv2dForward(const ConvDesc& d, const float* x,
                                     const float* w, const float* b,
                                     float* y) = 0;
  // dx = conv_transpose(dy, w).
  virtual absl::Status Conv2dBackwardData(const ConvDesc& d, const float* w,
                                          const float* dy, float* dx) = 0;
  // dw = sum over batch of x (*) dy; db = sum over batch, h, w of dy
  // (db may be null).
  virtual absl::Status Conv2dBackwardFilter(const ConvDesc& d, const float* x,
                                            const float* dy, float* dw,
                                            float* db) = 0;
  // y = max(conv(x, w) + b, 0): Conv2dForward then ReluForward as one
  // operation, which a backend may fuse (the oneDNN one applies the ReLU as
  // the convolution's post-op, saving a read and a write of the output). Its
  // backward is ReluBackward on this y, then Conv2dBackward* on the masked
  // gradient. Default: Conv2dForward, then ReluForward in place on y.
  virtual absl::Status Conv2dReluForward(const ConvDesc& d, const float* x,
                                         const float* w, const float* b,
                                         float* y);

  // ---- Activations and pooling --------------------------------------------
  // y = max(x, 0); y may be x.
  virtual absl::Status ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0; dx may be dy.
  virtual absl::Status ReluBackward(int64_t n, const float* y, const float* dy,
                                    float* dx) = 0;
  virtual absl::Status MaxPoolForward(const PoolDesc& d, const float* x,
                                      float* y) = 0;
  // dx (overwritten) receives dy at each window's first maximum.
  virtual absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                                       const float* y, const float* dy,
                                       float* dx) = 0;

  // Average pooling (count_include_pad); dx is overwritten.
  virtual absl::Status AvgPoolForward(const PoolDesc& d, const float* x,
                                      float* y);
  virtual absl::Status AvgPoolBackward(const PoolDesc& d, const float* dy,
                                       float* dx);

  // ---- Normalization and regularization ------------------------------------
  // Training forward: y = gamma * (x - mean_B) / sqrt(var_B + eps) + beta with
  // the batch's per-channel mean and biased variance; writes mean_B to
  // save_mean and 1 / sqrt(var_B + eps) to save_invstd (channels floats each,
  // for the backward pass) and, when running_mean / running_var are not null,
  // moves them by `momentum` (BatchNormDesc). Needs batch * spatial > 1.
  virtual absl::Status BatchNormForwardTraining(
      const BatchNormDesc& d, const float* x, const float* gamma,
      const float* beta, float momentum, float* running_mean,
      float* running_var, float* y, float* save_mean, float* save_invstd);
  // Evaluation forward with the running statistics.
  virtual absl::Status BatchNormForwardInference(
      const BatchNormDesc& d, const float* x, const float* gamma,
      const float* beta, const float* running_mean, const float* running_var,
      float* y);
  // y = max(batch norm, 0): BatchNormForwardTraining / Inference then
  // ReluForward as one operation, which a backend may fuse (the oneDNN one
  // applies the ReLU inside the normalization's pass: no separate pass over
  // the activations). Its backward is ReluBackward on this y, then
  // BatchNormBackward on the masked gradient. Default: the normalization,
  // then ReluForward in place on y.
  virtual absl::Status BatchNormReluForwardTraining(
      const BatchNormDesc& d, const float* x, const float* gamma,
      const float* beta, float momentum, float* running_mean,
      float* running_var, float* y, float* save_mean, float* save_invstd);
  virtual absl::Status BatchNormReluForwardInference(
      const BatchNormDesc& d, const float* x, const float* gamma,
      const float* beta, const float* running_mean, const float* running_var,
      float* y);
  // Backward of the training forward: overwrites dx, dgamma and dbeta.
  virtual absl::Status BatchNormBackward(const BatchNormDesc& d,
                                         const float* x, const float* dy,
                                         const float* gamma,
                                         const float* save_mean,
                                         const float* save_invstd, float* dx,
                                         float* dgamma, float* dbeta);
  // Inverted dropout's mask: mask[i] = 0 where DropoutUniform(seed, i) < rate,
  // else 1 / (1 - rate); the same values on every backend for a seed.
  // 0 <= rate < 1.
  virtual absl::Status DropoutMask(int64_t n, float rate, uint64_t seed,
                                   float* mask);
  // y[i] = a[i] * b[i]; y may be a or b.
  virtual absl::Status Multiply(int64_t n, const float* a, const float* b,
                                float* y);
  // A 2-D strided copy: dst[r * dst_stride + c] = src[r * src_stride + c] for
  // r < rows, c < cols (NCHW channel slices: concatenation and its
  // gradient). The regions must not overlap.
  virtual absl::Status CopyRows(int64_t rows, int64_t cols, const float* src,
                                int64_t src_stride, float* dst,
                                int64_t dst_stride);

  // ---- Loss ---------------------------------------------------------------
  // Softmax cross-entropy over `batch` rows of `classes` logits. `labels`
  // holds class indices stored as floats (backend memory). The target of a
  // row is q = (1 - eps) onehot(label) + eps / classes, eps the label
  // smoothing in [0, 1) (0: plain cross-entropy; Szegedy et al. 2016).
  // Writes the mean of -sum_c q_c log softmax(logits)_c to *host_loss, the
  // number of rows whose argmax equals the label to *host_correct, and, when
  // dlogits is not null, dlogits = (softmax(logits) - q) / batch.
  virtual absl::Status SoftmaxCrossEntropy(int batch, int classes,
                                           const float* logits,
                                           const float* labels,
                                           float label_smoothing,
                                           float* dlogits, float* host_loss,
                                           int64_t* host_correct) = 0;
  // As SoftmaxCrossEntropy, but a device backend may only queue the work:
  // *host_loss and *host_correct (which must stay valid) are written, and a
  // bad label is reported, by the next Synchronize() or CopyToHost(). This
  // lets a training step wait for the device once instead of between its
  // forward and backward passes. Default: SoftmaxCrossEntropy.
  virtual absl::Status SoftmaxCrossEntropyDeferred(
      int batch, int classes, const float* logits, const float* labels,
      float label_smoothing, float* dlogits, float* host_loss,
      int64_t* host_correct);
};

// The argument checks every backend applies to a descriptor:
// InvalidArgument naming `op` and the bad fields.
absl::Status ValidateConv(const ConvDesc& d, const char* op);
absl::Status ValidatePool(const PoolDesc& d, const char* op);
absl::Status ValidateGemm(int m, int n, int k);
absl::Status ValidateBatchNorm(const BatchNormDesc& d, const char* op);
// DropoutMask's draw for element i: a uniform value in [0, 1) from a hash of
// (seed, i) (splitmix64's finalizer, top 24 bits), identical on host and
// device.
float DropoutUniform(uint64_t seed, uint64_t i);
absl::Status ValidateSoftmaxShape(int batch, int classes);
// InvalidArgument unless 0 <= label_smoothing < 1.
absl::Status ValidateLabelSmoothing(float label_smoothing);
// An Allocate of n floats: InvalidArgument when negative, ResourceExhausted
// when too large to count in bytes.
absl::Status ValidateAllocation(int64_t n);

// RAII owner of one Allocate()d buffer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(Backend* backend, int64_t n);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  Backend* backend_ = nullptr;  // Not owned.
  float* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_BACKEND_H_
