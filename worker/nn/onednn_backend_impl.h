// File: worker/nn/onednn_backend_impl.h
//
// Internal to the oneDNN backend (onednn_backend.h, which describes it): the
// class behind NewOnednnBackend. Its operations are defined in
// onednn_backend.cc (memory, GEMM, convolutions, ReLU, max pooling) and
// onednn_norm_pool.cc (average pooling, batch normalization and the small
// elementwise ops); the pieces it is built from have units of their own:
// onednn_context.h, onednn_layouts.h and onednn_primitives.h.
//
// Thread-safety: as every Backend, one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_IMPL_H_
#define DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_IMPL_H_

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/backend.h"
#include "worker/nn/onednn_backend.h"
#include "worker/nn/onednn_context.h"
#include "worker/nn/onednn_layouts.h"
#include "worker/nn/onednn_primitives.h"

namespace downpour {
namespace onednn {

class OnednnBackend : public Backend {
 public:
  // Throws dnnl::error when oneDNN cannot create a CPU engine.
  OnednnBackend(const OnednnOptions& options, std::unique_ptr<Backend> loops)
      : options_(options),
        loops_(std::move(loops)),
        layouts_(&ctx_),
        prims_(&ctx_, options.winograd) {}

  std::string Name() const override { return "cpu (onednn)"; }

  // ---- Memory -------------------------------------------------------------
  absl::StatusOr<float*> Allocate(int64_t n) override;
  void Free(float* p) override {
    auto it = allocations_.find(p);
    if (it != allocations_.end()) {
      layouts_.Forget(p, Bytes(it->second));
      prims_.ClearWorkspacesStartingIn(p, Bytes(it->second));
      allocations_.erase(it);
    }
    std::free(p);
  }
  absl::Status CopyToDevice(const float* host_src, float* dst,
                            int64_t n) override;
  absl::Status CopyToHost(const float* src, float* host_dst,
                          int64_t n) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  bool HostMemory() const override { return true; }
  absl::Status Discard(float* p, int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("Discard: negative size");
    return Overwrite(p, n);
  }
  absl::Status Copy(const float* src, float* dst, int64_t n) override;

  // ---- Elementwise, bias, loss: the OpenBLAS backend's loops on plain
  // memory (inputs in a blocked layout are converted first). -------------
  absl::Status Fill(float* x, int64_t n, float value) override {
    if (n < 0) return absl::InvalidArgumentError("Fill: negative size");
    DP_RETURN_IF_ERROR(Overwrite(x, n));
    return loops_->Fill(x, n, value);
  }
  // On x and y as they are when both hold the same layout (a residual sum
  // of two blocked activations), else on plain memory (onednn_norm_pool.cc).
  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override;
  absl::Status AddRowBias(int rows, int cols, const float* bias,
                          float* y) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("AddRowBias: negative dimension");
    }
    DP_RETURN_IF_ERROR(ReadPlain(bias, cols));
    DP_RETURN_IF_ERROR(ReadPlain(y, int64_t{rows} * cols));
    return loops_->AddRowBias(rows, cols, bias, y);
  }
  absl::Status ColumnSum(int rows, int cols, const float* dy,
                         float* db) override {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("ColumnSum: negative dimension");
    }
    DP_RETURN_IF_ERROR(ReadPlain(dy, int64_t{rows} * cols));
    DP_RETURN_IF_ERROR(Overwrite(db, cols));
    return loops_->ColumnSum(rows, cols, dy, db);
  }
  absl::Status SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                   const float* labels, float label_smoothing,
                                   float* dlogits, float* host_loss,
                                   int64_t* host_correct) override {
    if (absl::Status s = ValidateSoftmaxShape(batch, classes); !s.ok()) {
      return s;
    }
    DP_RETURN_IF_ERROR(ReadPlain(logits, int64_t{batch} * classes));
    DP_RETURN_IF_ERROR(ReadPlain(labels, batch));
    if (dlogits != nullptr) {
      DP_RETURN_IF_ERROR(Overwrite(dlogits, int64_t{batch} * classes));
    }
    return loops_->SoftmaxCrossEntropy(batch, classes, logits, labels,
                                       label_smoothing, dlogits, host_loss,
                                       host_correct);
  }

  // ---- oneDNN -------------------------------------------------------------
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) override;
  absl::Status Conv2dForward(const ConvDesc& d, const float* x, const float* w,
                             const float* b, float* y) override;
  // The ReLU as the convolution's post-op where oneDNN has such a kernel for
  // the shape (PrimitiveCache::FusedRelu), else Conv2dForward and
  // ReluForward in place.
  absl::Status Conv2dReluForward(const ConvDesc& d, const float* x,
                                 const float* w, const float* b,
                                 float* y) override;
  absl::Status Conv2dBackwardData(const ConvDesc& d, const float* w,
                                  const float* dy, float* dx) override;
  absl::Status Conv2dBackwardFilter(const ConvDesc& d, const float* x,
                                    const float* dy, float* dw,
                                    float* db) override;
  absl::Status ReluForward(int64_t n, const float* x, float* y) override;
  absl::Status ReluBackward(int64_t n, const float* y, const float* dy,
                            float* dx) override;
  absl::Status MaxPoolForward(const PoolDesc& d, const float* x,
                              float* y) override;
  absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                               const float* y, const float* dy,
                               float* dx) override;

  // ---- onednn_norm_pool.cc ------------------------------------------------
  absl::Status AvgPoolForward(const PoolDesc& d, const float* x,
                              float* y) override;
  absl::Status AvgPoolBackward(const PoolDesc& d, const float* dy,
                               float* dx) override;
  absl::Status BatchNormForwardTraining(const BatchNormDesc& d, const float* x,
                                        const float* gamma, const float* beta,
                                        float momentum, float* running_mean,
                                        float* running_var, float* y,
                                        float* save_mean,
                                        float* save_invstd) override;
  absl::Status BatchNormForwardInference(const BatchNormDesc& d, const float* x,
                                         const float* gamma, const float* beta,
                                         const float* running_mean,
                                         const float* running_var,
                                         float* y) override;
  absl::Status BatchNormReluForwardTraining(
      const BatchNormDesc& d, const float* x, const float* gamma,
      const float* beta, float momentum, float* running_mean,
      float* running_var, float* y, float* save_mean,
      float* save_invstd) override;
  absl::Status BatchNormReluForwardInference(const BatchNormDesc& d,
                                             const float* x,
                                             const float* gamma,
                                             const float* beta,
                                             const float* running_mean,
                                             const float* running_var,
                                             float* y) override;
  absl::Status BatchNormBackward(const BatchNormDesc& d, const float* x,
                                 const float* dy, const float* gamma,
                                 const float* save_mean,
                                 const float* save_invstd, float* dx,
                                 float* dgamma, float* dbeta) override;
  absl::Status DropoutMask(int64_t n, float rate, uint64_t seed,
                           float* mask) override;
  absl::Status Multiply(int64_t n, const float* a, const float* b,
                        float* y) override;
  absl::Status CopyRows(int64_t rows, int64_t cols, const float* src,
                        int64_t src_stride, float* dst,
                        int64_t dst_stride) override;

 private:
  static size_t Bytes(int64_t n) { return static_cast<size_t>(n) * 4; }

  // Sets this thread's OpenMP thread count (a per-thread setting). oneDNN
  // reads it both when a primitive is created (its work split) and when it
  // runs, so it is set before either.
  void EnterOp() const { omp_set_num_threads(options_.threads); }
  // Runs the forward `f` of p (p.fwd or p.fwd_relu) with bias b (may be
  // null) into y, which then holds f's output layout.
  absl::Status RunConvForward(ConvPrims& p, ConvFwd& f, const ConvDesc& d,
                              const float* x, const float* w, const float* b,
                              float* y, const char* op);
  // Pooling forward with `alg` (max: also records the argmax workspace).
  absl::Status RunPoolForward(const PoolDesc& d, dnnl::algorithm alg,
                              const float* x, float* y, const char* op);
  // The batch-norm primitives of d for x's layout: a recorded 4-D one of
  // d's shape, else plain {N, C, spatial, 1} (x converted first).
  absl::StatusOr<BatchNormPrims*> BatchNormFor(const BatchNormDesc& d,
                                               const float* x, const char* op);
  // The training / inference forwards, with the ReLU fused in when `relu`.
  absl::Status RunBatchNormTraining(const BatchNormDesc& d, const float* x,
                                    const float* gamma, const float* beta,
                                    float momentum, float* running_mean,
                                    float* running_var, float* y,
                                    float* save_mean, float* save_invstd,
                                    bool relu, const char* op);
  absl::Status RunBatchNormInference(const BatchNormDesc& d, const float* x,
                                     const float* gamma, const float* beta,
                                     const float* running_mean,
                                     const float* running_var, float* y,
                                     bool relu, const char* op);
  // The layout two elementwise inputs a and b of n floats share, written to
  // *md, when both hold the same recorded one and y (the output) is one of
  // them or overlaps neither; else false, after converting them to plain.
  bool SharedLayoutOrThrow(const float* a, const float* b, const float* y,
                           int64_t n, dnnl::memory::desc* md);

  // ---- Layouts (throw dnnl::error; run under Guard) -----------------------
  // Before [p, p + n floats) is written: its regions are dropped (or
  // converted, when they reach beyond it) and pooling workspaces recorded on
  // it are cleared.
  void OverwriteOrThrow(const float* p, int64_t n) {
    prims_.ClearWorkspacesOverlapping(p, Bytes(n));
    layouts_.Overwrite(p, n);
  }
  // The input tensor at p (plain layout `plain`) in layout `want`: p itself
  // when it already is, else a copy reordered into `spare`.
  void* Input(const float* p, const dnnl::memory::desc& plain,
              const dnnl::memory::desc& want,
              std::unique_ptr<dnnl::memory>& spare);
  // Where an op writes its output of layout `want` for the plain tensor at p:
  // p itself when `want` fits its bytes, else `spare`; FinishOutput then
  // reorders the spare into p, or records p's layout.
  void* Output(float* p, const dnnl::memory::desc& plain,
               const dnnl::memory::desc& want,
               std::unique_ptr<dnnl::memory>& spare);
  void FinishOutput(float* p, const dnnl::memory::desc& plain,
                    const dnnl::memory::desc& want,
                    std::unique_ptr<dnnl::memory>& spare);

  // The same as Status, with a fast path when nothing is tracked.
  absl::Status ReadPlain(const float* p, int64_t n) {
    if (layouts_.empty()) return absl::OkStatus();
    return Guard("layout conversion", [&] {
      layouts_.ReadPlain(p, n);
      return absl::OkStatus();
    });
  }
  absl::Status Overwrite(const float* p, int64_t n) {
    if (layouts_.empty() && !prims_.AnyWorkspace()) return absl::OkStatus();
    return Guard("layout conversion", [&] {
      OverwriteOrThrow(p, n);
      return absl::OkStatus();
    });
  }

  const OnednnOptions options_;
  std::unique_ptr<Backend> loops_;
  onednn::Context ctx_;
  onednn::LayoutTracker layouts_;
  onednn::PrimitiveCache prims_;
  std::map<const float*, int64_t> allocations_;  // Allocate()d, in floats.
};

}  // namespace onednn
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_IMPL_H_
