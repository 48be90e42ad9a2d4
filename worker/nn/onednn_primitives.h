// File: worker/nn/onednn_primitives.h
//
// The oneDNN primitives of the oneDNN backend (onednn_backend.h), built once
// per shape and kept: convolution forward (with fused bias; with the ReLU as
// eltwise post-op, made on first use), backward-data and backward-weights
// (with fused bias gradient); max and average pooling forward and backward
// and batch normalization (training, inference, backward) per input layout;
// ReLU forward and backward. Every primitive runs in user scratchpad
// mode: each family records the largest scratchpad it needs, and the backend
// passes the shared one (Context::Scratch).
//
// Convolutions let oneDNN choose the layouts of their tensors
// (format_tag::any); the chosen descriptors are kept beside the primitives,
// with spare buffers for arguments that arrive in another layout.
//
// Algorithms: with `winograd`, 3x3 stride-1 convolutions whose channel counts
// are multiples of 16 use oneDNN's Winograd F(4x4, 3x3) kernels in each
// direction where this CPU has them (AVX-512), else direct convolution.
//
// Max pooling's backward needs the argmax workspace of a training forward on
// the same input and output: the cache records, per pooling primitive, the
// buffers of the forward whose workspace it holds, and drops that record
// when those buffers are written or freed (the *Workspace* methods).
//
// Usage:
//   onednn::PrimitiveCache prims(&ctx, /*winograd=*/true);
//   DP_ASSIGN_OR_RETURN(onednn::ConvPrims* c, prims.Conv(d, "Conv2dForward"));
//   c->fwd.prim.execute(ctx.stream(), {...});
//
// Thread-safety: none; owned by one backend, used by one thread at a time.
// oneDNN fixes a primitive's thread count when it creates it: set the calling
// thread's OpenMP thread count before Conv() and Pool().
#ifndef DOWNPOUR_WORKER_NN_ONEDNN_PRIMITIVES_H_
#define DOWNPOUR_WORKER_NN_ONEDNN_PRIMITIVES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/backend.h"
#include "worker/nn/onednn_context.h"

namespace downpour {
namespace onednn {

// A convolution forward primitive, the layouts it chose for src, weights and
// dst, and the buffers of reorders into them.
struct ConvFwd {
  dnnl::convolution_forward prim;
  std::string impl;  // oneDNN's implementation name, e.g. "jit:avx512_core".
  dnnl::memory::desc x, w, y, scratch;
  std::unique_ptr<dnnl::memory> x_buf, w_buf, y_buf;
};

// The convolution primitives of one shape, the layouts they chose and the
// buffers of the weight-side reorders. `fwd_relu`, the forward with the ReLU
// fused in, is made by PrimitiveCache::FusedRelu: it stays null when oneDNN
// has no such kernel, or not the kernel of `fwd`.
struct ConvPrims {
  ConvFwd fwd;
  dnnl::algorithm fwd_alg = dnnl::algorithm::convolution_direct;
  bool fwd_relu_tried = false;
  std::unique_ptr<ConvFwd> fwd_relu;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  std::string algorithms;  // For the log / tests: "fwd/bwd_data/bwd_weights".
  dnnl::memory::desc x_plain, w_plain, y_plain, b_md;
  // Backward data: weights, diff_dst, diff_src. Backward weights: src,
  // diff_dst, diff_weights.
  dnnl::memory::desc d_w, d_dy, d_dx, w_x, w_dy, w_dw;
  std::unique_ptr<dnnl::memory> d_w_buf, d_dy_buf, d_dx_buf, w_x_buf, w_dy_buf,
      w_dw_buf;
  dnnl::memory zero_bias, spare_dbias;
  dnnl::memory::desc scratch_data, scratch_weights;
  size_t scratch_bytes = 0;  // The largest of all the primitives' scratchpads.
};

// Pooling (max, or average counting the padding) of one shape whose input
// is in layout `src` (the output and the gradients take the same layout):
// the training forward (for max pooling it also writes the workspace of
// argmax positions; average pooling has none) and the backward.
struct PoolPrims {
  dnnl::pooling_forward train;
  dnnl::pooling_backward bwd;
  dnnl::memory::desc src, dst;
  std::unique_ptr<dnnl::memory> y_buf, dy_buf, dx_buf, spare_y;
  dnnl::memory workspace;
  // The buffers of the last training forward, whose argmax positions the
  // workspace holds (the interface's contract: Backward gets Forward's x and
  // y). Null when the workspace belongs to no caller's buffers. Changed
  // through PrimitiveCache's *Workspace* methods only.
  const float* ws_x = nullptr;
  const float* ws_y = nullptr;
  dnnl::memory::desc scratch_train, scratch_bwd;
  size_t scratch_bytes = 0;
};

// Batch normalization of one shape (dims {N, C, H, W} or {N, C, spatial, 1})
// whose input is in layout `src` (y, dy and dx take the same layout), with
// scale (gamma) and shift (beta): the training forward (batch statistics out),
// the inference forward (running statistics in) and the backward (all
// gradients). `variance` holds the channels' variance between oneDNN and the
// interface, which passes 1 / sqrt(variance + eps) instead.
struct BatchNormPrims {
  dnnl::batch_normalization_forward train, infer;
  // The same with the ReLU fused in (fuse_norm_relu); train_relu writes
  // its ReLU mask to relu_workspace, which nothing reads (the backward pass
  // is ReluBackward, then bwd).
  dnnl::batch_normalization_forward train_relu, infer_relu;
  dnnl::memory relu_workspace;
  dnnl::memory::desc scratch_train_relu, scratch_infer_relu;
  dnnl::batch_normalization_backward bwd;
  dnnl::memory::desc src, stat;
  dnnl::memory variance;
  // oneDNN 2.6's backward with use_shift will not run without a shift
  // argument, though no result depends on it.
  dnnl::memory unused_shift;
  std::unique_ptr<dnnl::memory> dy_buf;
  dnnl::memory::desc scratch_train, scratch_infer, scratch_bwd;
  size_t scratch_bytes = 0;
};

// ReLU forward and backward (from the output: dx = dy where y > 0) over n
// floats, as oneDNN eltwise primitives (vectorized for the machine).
struct ReluPrims {
  dnnl::eltwise_forward fwd;
  dnnl::eltwise_backward bwd;
  dnnl::memory::desc md;
};

class PrimitiveCache {
 public:
  // `ctx` provides the engine. Not owned; must outlive the cache.
  PrimitiveCache(Context* ctx, bool winograd)
      : ctx_(ctx), winograd_(winograd) {}
  PrimitiveCache(const PrimitiveCache&) = delete;
  PrimitiveCache& operator=(const PrimitiveCache&) = delete;

  // The convolution primitives of d, made on first use. Errors:
  // InvalidArgument for a bad d (ValidateConv naming `op`), Internal when
  // oneDNN cannot make them.
  absl::StatusOr<ConvPrims*> Conv(const ConvDesc& d, const char* op);

  // p's forward with the ReLU fused in (p from Conv(d)), made once: with the
  // algorithm of the plain forward, and kept only when oneDNN runs it with
  // the same kernel (the post-op must not cost a slower implementation, e.g.
  // a reference one or the direct algorithm instead of Winograd). Null when
  // there is none: the caller then runs the convolution and the ReLU apart.
  ConvFwd* FusedRelu(const ConvDesc& d, ConvPrims& p);

  // The pooling of d with `alg` (pooling_max or
  // pooling_avg_include_padding) whose input is in layout `src`, made on
  // first use. Errors: Internal naming `op` when oneDNN cannot make it.
  absl::StatusOr<PoolPrims*> Pool(const PoolDesc& d, dnnl::algorithm alg,
                                  const dnnl::memory::desc& src,
                                  const char* op);

  // The pooling of d with `alg` made earlier whose output is in layout
  // `dst`, or null: average pooling's backward has no input to take the
  // layout from.
  PoolPrims* FindPoolByOutput(const PoolDesc& d, dnnl::algorithm alg,
                              const dnnl::memory::desc& dst);

  // The batch normalization of d (eps included) whose input is in layout
  // `src` (dims {N, C, ...} with the product of the rest d.spatial), made on
  // first use. Errors: Internal naming `op` when oneDNN cannot make it.
  absl::StatusOr<BatchNormPrims*> BatchNorm(const BatchNormDesc& d,
                                            const dnnl::memory::desc& src,
                                            const char* op);

  // The ReLU of n floats, made on first use. Throws dnnl::error.
  ReluPrims* Relu(int64_t n);

  // ---- Pooling workspaces --------------------------------------------------
  // True when some pooling primitive's workspace belongs to caller buffers.
  bool AnyWorkspace() const { return workspaces_ > 0; }
  // p's workspace now holds the argmax of a forward from x into y.
  void SetWorkspace(PoolPrims& p, const float* x, const float* y);
  // p's workspace belongs to no caller buffers any more.
  void ClearWorkspace(PoolPrims& p);
  // Before [p, p + bytes) is written: workspaces whose forward's x or y
  // overlaps those bytes are cleared.
  void ClearWorkspacesOverlapping(const void* p, size_t bytes);
  // [p, p + bytes) is freed: workspaces whose forward's x or y starts in it
  // are cleared.
  void ClearWorkspacesStartingIn(const void* p, size_t bytes);

 private:
  using ConvKey = std::array<int, 9>;
  using PoolKey = std::array<int, 8>;
  using BatchNormKey = std::array<int64_t, 4>;

  Context* const ctx_;  // Not owned.
  const bool winograd_;
  std::map<ConvKey, std::unique_ptr<ConvPrims>> convs_;
  std::map<PoolKey, std::vector<std::unique_ptr<PoolPrims>>> pools_;
  std::map<BatchNormKey, std::vector<std::unique_ptr<BatchNormPrims>>> norms_;
  int workspaces_ = 0;  // Pool prims whose ws_x is set.
  std::map<int64_t, std::unique_ptr<ReluPrims>> relus_;
};

}  // namespace onednn
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_PRIMITIVES_H_
