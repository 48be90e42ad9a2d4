// File: worker/nn/onednn_norm_pool.cc
//
// The oneDNN backend's pooling (max and average), batch normalization and
// small elementwise ops (the class: onednn_backend_impl.h).
//
// Layouts: pooling and batch normalization run on their input in the layout
// it is held in (e.g. nChw16c after a convolution) and write their outputs
// in it, as the convolutions do; Axpy and Multiply work on two tensors of
// the same recorded layout as they are (elementwise, the order of the
// floats does not matter) and keep it. Everything else reads and writes
// plain memory.
//
// Batch normalization: oneDNN's primitive returns the batch variance where
// the interface keeps 1 / sqrt(variance + eps) (save_invstd), and it does
// not move running statistics: both are small per-channel loops here. The
// backward hands oneDNN the variance recovered from save_invstd.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/backend.h"
#include "worker/nn/cpu_reference_ops.h"
#include "worker/nn/onednn_backend_impl.h"
#include "worker/nn/op_checks.h"

namespace downpour {
namespace onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Whether [a, a + n) and [b, b + n) floats share a byte.
bool Overlap(const float* a, const float* b, int64_t n) {
  const uintptr_t bytes = static_cast<uintptr_t>(n) * 4;
  return Addr(a) < Addr(b) + bytes && Addr(b) < Addr(a) + bytes;
}

// Plain tensors of a pooling's input and output.
memory::desc PoolX(const PoolDesc& d) {
  return Plain({d.batch, d.channels, d.in_h, d.in_w}, Tag::nchw);
}
memory::desc PoolY(const PoolDesc& d) {
  return Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::nchw);
}

}  // namespace

// ---- Elementwise ------------------------------------------------------------

bool OnednnBackend::SharedLayoutOrThrow(const float* a, const float* b,
                                        const float* y, int64_t n,
                                        memory::desc* md) {
  const memory::desc* ma = layouts_.Find(a, Bytes(n));
  const memory::desc* mb = layouts_.Find(b, Bytes(n));
  if (ma != nullptr && mb != nullptr && *ma == *mb &&
      (y == a || y == b || (!Overlap(y, a, n) && !Overlap(y, b, n)))) {
    *md = *ma;
    return true;
  }
  layouts_.ReadPlain(a, n);
  layouts_.ReadPlain(b, n);
  return false;
}

absl::Status OnednnBackend::Axpy(int64_t n, float alpha, const float* x,
                                 float* y) {
  DP_RETURN_IF_ERROR(CheckSize(n, "Axpy"));
  if (layouts_.empty() && !prims_.AnyWorkspace()) {
    return loops_->Axpy(n, alpha, x, y);
  }
  return Guard("Axpy", [&] {
    memory::desc md;
    const bool blocked = SharedLayoutOrThrow(x, y, y, n, &md);
    OverwriteOrThrow(y, n);  // Clears pooling workspaces on y.
    DP_RETURN_IF_ERROR(loops_->Axpy(n, alpha, x, y));
    if (blocked) layouts_.Set(y, md);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Multiply(int64_t n, const float* a, const float* b,
                                     float* y) {
  DP_RETURN_IF_ERROR(CheckSize(n, "Multiply"));
  return Guard("Multiply", [&] {
    memory::desc md;
    const bool blocked = SharedLayoutOrThrow(a, b, y, n, &md);
    OverwriteOrThrow(y, n);
    cpu_ops::Multiply(a, b, y, 0, n);
    if (blocked) layouts_.Set(y, md);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::DropoutMask(int64_t n, float rate, uint64_t seed,
                                        float* mask) {
  DP_RETURN_IF_ERROR(CheckDropoutMask(n, rate));
  DP_RETURN_IF_ERROR(Overwrite(mask, n));
  cpu_ops::DropoutMask(rate, seed, mask, 0, n);
  return absl::OkStatus();
}

absl::Status OnednnBackend::CopyRows(int64_t rows, int64_t cols,
                                     const float* src, int64_t src_stride,
                                     float* dst, int64_t dst_stride) {
  DP_RETURN_IF_ERROR(CheckCopyRows(rows, cols, src_stride, dst_stride));
  if (rows == 0 || cols == 0) return absl::OkStatus();
  const int64_t src_n = (rows - 1) * src_stride + cols;
  const int64_t dst_n = (rows - 1) * dst_stride + cols;
  return Guard("CopyRows", [&] {
    layouts_.ReadPlain(src, src_n);
    // The gaps between dst's rows keep their values: plain from here on.
    if (rows > 1 && dst_stride > cols) layouts_.ReadPlain(dst, dst_n);
    OverwriteOrThrow(dst, dst_n);
    cpu_ops::CopyRows(rows, cols, src, src_stride, dst, dst_stride);
    return absl::OkStatus();
  });
}

// ---- Pooling ----------------------------------------------------------------

absl::Status OnednnBackend::RunPoolForward(const PoolDesc& d,
                                           dnnl::algorithm alg, const float* x,
                                           float* y, const char* op) {
  DP_RETURN_IF_ERROR(ValidatePool(d, op));
  EnterOp();  // Before Pool(): see Conv2dForward.
  const memory::desc x_plain = PoolX(d), y_plain = PoolY(d);
  memory::desc src;
  DP_RETURN_IF_ERROR(Guard(op, [&] {
    src = layouts_.LayoutOf(x, x_plain);
    return absl::OkStatus();
  }));
  DP_ASSIGN_OR_RETURN(PoolPrims * pp, prims_.Pool(d, alg, src, op));
  PoolPrims& p = *pp;
  const bool max = alg == dnnl::algorithm::pooling_max;
  return Guard(op, [&] {
    const dnnl::engine& e = ctx_.engine();
    void* dst = Output(y, y_plain, p.dst, p.y_buf);
    // Max pooling's training forward also records the argmax workspace; it
    // costs the same memory traffic as inference plus one byte per output.
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(p.src, e, const_cast<float*>(x))},
        {DNNL_ARG_DST, memory(p.dst, e, dst)},
        {DNNL_ARG_SCRATCHPAD, ctx_.Scratch(p.scratch_train, p.scratch_bytes)}};
    if (max) args.insert({DNNL_ARG_WORKSPACE, p.workspace});
    p.train.execute(ctx_.stream(), args);
    ctx_.stream().wait();
    FinishOutput(y, y_plain, p.dst, p.y_buf);
    if (max) prims_.SetWorkspace(p, x, y);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::MaxPoolForward(const PoolDesc& d, const float* x,
                                           float* y) {
  return RunPoolForward(d, dnnl::algorithm::pooling_max, x, y,
                        "MaxPoolForward");
}

absl::Status OnednnBackend::AvgPoolForward(const PoolDesc& d, const float* x,
                                           float* y) {
  return RunPoolForward(d, dnnl::algorithm::pooling_avg_include_padding, x, y,
                        "AvgPoolForward");
}

// oneDNN's max-pool backward routes dy through the argmax workspace of a
// training forward. When the last forward of this shape and layout was on
// these x and y, unchanged since, its workspace is used; otherwise the
// forward runs again here (a cheap, memory-bound pass) into a spare output.
absl::Status OnednnBackend::MaxPoolBackward(const PoolDesc& d, const float* x,
                                            const float* y, const float* dy,
                                            float* dx) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "MaxPoolBackward"));
  EnterOp();  // Before Pool(): see Conv2dForward.
  const memory::desc x_plain = PoolX(d), y_plain = PoolY(d);
  memory::desc src;
  DP_RETURN_IF_ERROR(Guard("MaxPoolBackward", [&] {
    src = layouts_.LayoutOf(x, x_plain);
    return absl::OkStatus();
  }));
  DP_ASSIGN_OR_RETURN(
      PoolPrims * pp,
      prims_.Pool(d, dnnl::algorithm::pooling_max, src, "MaxPoolBackward"));
  PoolPrims& p = *pp;
  return Guard("MaxPoolBackward", [&] {
    const dnnl::engine& e = ctx_.engine();
    if (p.ws_x != x || p.ws_y != y) {
      memory& spare_y = Spare(p.spare_y, p.dst, e);
      p.train.execute(ctx_.stream(),
                      {{DNNL_ARG_SRC, memory(p.src, e, const_cast<float*>(x))},
                       {DNNL_ARG_DST, spare_y},
                       {DNNL_ARG_WORKSPACE, p.workspace},
                       {DNNL_ARG_SCRATCHPAD,
                        ctx_.Scratch(p.scratch_train, p.scratch_bytes)}});
      // The workspace now belongs to the spare's forward.
      prims_.ClearWorkspace(p);
    }
    void* ddst = Input(dy, y_plain, p.dst, p.dy_buf);
    void* dsrc = Output(dx, x_plain, p.src, p.dx_buf);
    p.bwd.execute(
        ctx_.stream(),
        {{DNNL_ARG_DIFF_DST, memory(p.dst, e, ddst)},
         {DNNL_ARG_WORKSPACE, p.workspace},
         {DNNL_ARG_DIFF_SRC, memory(p.src, e, dsrc)},
         {DNNL_ARG_SCRATCHPAD, ctx_.Scratch(p.scratch_bwd, p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(dx, x_plain, p.src, p.dx_buf);
    return absl::OkStatus();
  });
}

// Without x, dx takes the layout of the forward whose output layout dy has
// (the usual case: the forward of this shape ran just before); else plain.
absl::Status OnednnBackend::AvgPoolBackward(const PoolDesc& d, const float* dy,
                                            float* dx) {
  DP_RETURN_IF_ERROR(ValidatePool(d, "AvgPoolBackward"));
  EnterOp();  // Before Pool(): see Conv2dForward.
  constexpr dnnl::algorithm kAvg = dnnl::algorithm::pooling_avg_include_padding;
  const memory::desc x_plain = PoolX(d), y_plain = PoolY(d);
  PoolPrims* pp = nullptr;
  DP_RETURN_IF_ERROR(Guard("AvgPoolBackward", [&] {
    pp = prims_.FindPoolByOutput(d, kAvg, layouts_.LayoutOf(dy, y_plain));
    return absl::OkStatus();
  }));
  if (pp == nullptr) {
    DP_ASSIGN_OR_RETURN(pp, prims_.Pool(d, kAvg, x_plain, "AvgPoolBackward"));
  }
  PoolPrims& p = *pp;
  return Guard("AvgPoolBackward", [&] {
    const dnnl::engine& e = ctx_.engine();
    void* ddst = Input(dy, y_plain, p.dst, p.dy_buf);
    void* dsrc = Output(dx, x_plain, p.src, p.dx_buf);
    p.bwd.execute(
        ctx_.stream(),
        {{DNNL_ARG_DIFF_DST, memory(p.dst, e, ddst)},
         {DNNL_ARG_DIFF_SRC, memory(p.src, e, dsrc)},
         {DNNL_ARG_SCRATCHPAD, ctx_.Scratch(p.scratch_bwd, p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(dx, x_plain, p.src, p.dx_buf);
    return absl::OkStatus();
  });
}

// ---- Batch normalization ----------------------------------------------------

absl::StatusOr<BatchNormPrims*> OnednnBackend::BatchNormFor(
    const BatchNormDesc& d, const float* x, const char* op) {
  EnterOp();  // Before BatchNorm(): oneDNN fixes its thread count then.
  memory::desc src;
  DP_RETURN_IF_ERROR(Guard(op, [&] {
    if (const memory::desc* md = layouts_.Find(x, Bytes(d.Size()))) {
      const memory::dims dims = md->dims();
      if (dims.size() == 4 && dims[0] == d.batch && dims[1] == d.channels &&
          dims[2] * dims[3] == d.spatial) {
        src = *md;
        return absl::OkStatus();
      }
    }
    layouts_.ReadPlain(x, d.Size());
    src = Plain({d.batch, d.channels, d.spatial, 1}, Tag::nchw);
    return absl::OkStatus();
  }));
  return prims_.BatchNorm(d, src, op);
}

absl::Status OnednnBackend::BatchNormForwardTraining(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, float momentum, float* running_mean, float* running_var,
    float* y, float* save_mean, float* save_invstd) {
  return RunBatchNormTraining(d, x, gamma, beta, momentum, running_mean,
                              running_var, y, save_mean, save_invstd,
                              /*relu=*/false, "BatchNormForwardTraining");
}

absl::Status OnednnBackend::BatchNormReluForwardTraining(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, float momentum, float* running_mean, float* running_var,
    float* y, float* save_mean, float* save_invstd) {
  return RunBatchNormTraining(d, x, gamma, beta, momentum, running_mean,
                              running_var, y, save_mean, save_invstd,
                              /*relu=*/true, "BatchNormReluForwardTraining");
}

absl::Status OnednnBackend::RunBatchNormTraining(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, float momentum, float* running_mean, float* running_var,
    float* y, float* save_mean, float* save_invstd, bool relu,
    const char* op) {
  DP_RETURN_IF_ERROR(CheckBatchNormTraining(d, momentum));
  DP_ASSIGN_OR_RETURN(BatchNormPrims * pp, BatchNormFor(d, x, op));
  BatchNormPrims& p = *pp;
  return Guard(op, [&] {
    const int c_n = d.channels;
    layouts_.ReadPlain(gamma, c_n);
    layouts_.ReadPlain(beta, c_n);
    OverwriteOrThrow(save_mean, c_n);
    OverwriteOrThrow(save_invstd, c_n);
    if (running_mean != nullptr) layouts_.ReadPlain(running_mean, c_n);
    if (running_var != nullptr) layouts_.ReadPlain(running_var, c_n);
    const dnnl::engine& e = ctx_.engine();
    const memory::desc plain = PlainOf(p.src);
    void* dst = Output(y, plain, p.src, p.dy_buf);  // Never the spare.
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(p.src, e, const_cast<float*>(x))},
        {DNNL_ARG_DST, memory(p.src, e, dst)},
        {DNNL_ARG_MEAN, memory(p.stat, e, save_mean)},
        {DNNL_ARG_VARIANCE, p.variance},
        {DNNL_ARG_SCALE, memory(p.stat, e, const_cast<float*>(gamma))},
        {DNNL_ARG_SHIFT, memory(p.stat, e, const_cast<float*>(beta))},
        {DNNL_ARG_SCRATCHPAD,
         ctx_.Scratch(relu ? p.scratch_train_relu : p.scratch_train,
                      p.scratch_bytes)}};
    if (relu) args.insert({DNNL_ARG_WORKSPACE, p.relu_workspace});
    (relu ? p.train_relu : p.train).execute(ctx_.stream(), args);
    ctx_.stream().wait();
    FinishOutput(y, plain, p.src, p.dy_buf);
    const float* var = static_cast<const float*>(p.variance.get_data_handle());
    const double m = static_cast<double>(int64_t{d.batch} * d.spatial);
    for (int c = 0; c < c_n; ++c) {
      save_invstd[c] =
          static_cast<float>(1.0 / std::sqrt(double{var[c]} + d.eps));
      if (running_mean != nullptr) {
        running_mean[c] =
            static_cast<float>((1.0 - momentum) * running_mean[c] +
                               momentum * double{save_mean[c]});
      }
      if (running_var != nullptr) {
        running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] +
                                            momentum * var[c] * m / (m - 1));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::BatchNormForwardInference(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var,
    float* y) {
  return RunBatchNormInference(d, x, gamma, beta, running_mean, running_var,
                               y, /*relu=*/false, "BatchNormForwardInference");
}

absl::Status OnednnBackend::BatchNormReluForwardInference(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var,
    float* y) {
  return RunBatchNormInference(d, x, gamma, beta, running_mean, running_var,
                               y, /*relu=*/true,
                               "BatchNormReluForwardInference");
}

absl::Status OnednnBackend::RunBatchNormInference(
    const BatchNormDesc& d, const float* x, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var,
    float* y, bool relu, const char* op) {
  DP_RETURN_IF_ERROR(ValidateBatchNorm(d, op));
  DP_ASSIGN_OR_RETURN(BatchNormPrims * pp, BatchNormFor(d, x, op));
  BatchNormPrims& p = *pp;
  return Guard(op, [&] {
    const int c_n = d.channels;
    for (const float* v : {gamma, beta, running_mean, running_var}) {
      layouts_.ReadPlain(v, c_n);
    }
    const dnnl::engine& e = ctx_.engine();
    const memory::desc plain = PlainOf(p.src);
    void* dst = Output(y, plain, p.src, p.dy_buf);  // Never the spare.
    (relu ? p.infer_relu : p.infer).execute(
        ctx_.stream(),
        {{DNNL_ARG_SRC, memory(p.src, e, const_cast<float*>(x))},
         {DNNL_ARG_DST, memory(p.src, e, dst)},
         {DNNL_ARG_MEAN, memory(p.stat, e, const_cast<float*>(running_mean))},
         {DNNL_ARG_VARIANCE,
          memory(p.stat, e, const_cast<float*>(running_var))},
         {DNNL_ARG_SCALE, memory(p.stat, e, const_cast<float*>(gamma))},
         {DNNL_ARG_SHIFT, memory(p.stat, e, const_cast<float*>(beta))},
         {DNNL_ARG_SCRATCHPAD,
          ctx_.Scratch(relu ? p.scratch_infer_relu : p.scratch_infer,
                       p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(y, plain, p.src, p.dy_buf);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::BatchNormBackward(
    const BatchNormDesc& d, const float* x, const float* dy, const float* gamma,
    const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
    float* dbeta) {
  const char* op = "BatchNormBackward";
  DP_RETURN_IF_ERROR(ValidateBatchNorm(d, op));
  DP_ASSIGN_OR_RETURN(BatchNormPrims * pp, BatchNormFor(d, x, op));
  BatchNormPrims& p = *pp;
  return Guard(op, [&] {
    const int c_n = d.channels;
    for (const float* v : {gamma, save_mean, save_invstd}) {
      layouts_.ReadPlain(v, c_n);
    }
    // The variance oneDNN normalizes with: 1 / invstd^2 - eps, so that its
    // 1 / sqrt(variance + eps) gives save_invstd back to rounding.
    float* var = static_cast<float*>(p.variance.get_data_handle());
    for (int c = 0; c < c_n; ++c) {
      const double inv = save_invstd[c];
      var[c] = static_cast<float>(1.0 / (inv * inv) - d.eps);
    }
    const dnnl::engine& e = ctx_.engine();
    const memory::desc plain = PlainOf(p.src);
    void* ddst = Input(dy, plain, p.src, p.dy_buf);
    OverwriteOrThrow(dgamma, c_n);
    OverwriteOrThrow(dbeta, c_n);
    // dx may be dy (in place): oneDNN allows it, and the spare is not dx.
    void* dsrc = Output(dx, plain, p.src, p.dy_buf);
    p.bwd.execute(
        ctx_.stream(),
        {{DNNL_ARG_SRC, memory(p.src, e, const_cast<float*>(x))},
         {DNNL_ARG_MEAN, memory(p.stat, e, const_cast<float*>(save_mean))},
         {DNNL_ARG_VARIANCE, p.variance},
         {DNNL_ARG_DIFF_DST, memory(p.src, e, ddst)},
         {DNNL_ARG_SCALE, memory(p.stat, e, const_cast<float*>(gamma))},
         {DNNL_ARG_SHIFT, p.unused_shift},
         {DNNL_ARG_DIFF_SRC, memory(p.src, e, dsrc)},
         {DNNL_ARG_DIFF_SCALE, memory(p.stat, e, dgamma)},
         {DNNL_ARG_DIFF_SHIFT, memory(p.stat, e, dbeta)},
         {DNNL_ARG_SCRATCHPAD, ctx_.Scratch(p.scratch_bwd, p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(dx, plain, p.src, p.dy_buf);
    return absl::OkStatus();
  });
}

}  // namespace onednn
}  // namespace downpour
