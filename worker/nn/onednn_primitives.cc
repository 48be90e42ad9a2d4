// File: worker/nn/onednn_primitives.cc (see onednn_primitives.h).
#include "worker/nn/onednn_primitives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {
namespace onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, AVX-512 only) applies to 3x3,
// stride-1 convolutions whose channel counts are multiples of 16.
bool WinogradShape(const ConvDesc& d) {
  return d.kernel_h == 3 && d.kernel_w == 3 && d.stride == 1 &&
         d.in_channels % 16 == 0 && d.out_channels % 16 == 0;
}

// The training forward of d with algorithm `alg` (throws dnnl::error where
// oneDNN has none). With `relu`, the ReLU is the convolution's eltwise
// post-op: applied to each block of output while the kernel still holds it,
// so y is written once, already rectified, with no pass of its own.
dnnl::convolution_forward::primitive_desc ConvFwdPd(const ConvDesc& d,
                                                    dnnl::algorithm alg,
                                                    bool relu,
                                                    const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT: the primitive API reads better unqualified.
  const memory::dims strides = {d.stride, d.stride}, pad = {d.pad, d.pad};
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  if (relu) {
    post_ops ops;
    ops.append_eltwise(/*scale=*/1.f, algorithm::eltwise_relu, /*alpha=*/0.f,
                       /*beta=*/0.f);
    attr.set_post_ops(ops);
  }
  return convolution_forward::primitive_desc(
      {prop_kind::forward_training, alg,
       Plain({d.batch, d.in_channels, d.in_h, d.in_w}, Tag::any),
       Plain({d.out_channels, d.in_channels, d.kernel_h, d.kernel_w}, Tag::any),
       Plain({d.out_channels}, Tag::x),
       Plain({d.batch, d.out_channels, d.OutH(), d.OutW()}, Tag::any), strides,
       pad, pad},
      attr, e);
}

ConvFwd MakeConvFwd(const dnnl::convolution_forward::primitive_desc& pd) {
  ConvFwd f;
  f.prim = dnnl::convolution_forward(pd);
  f.impl = pd.impl_info_str();
  f.x = pd.src_desc();
  f.w = pd.weights_desc();
  f.y = pd.dst_desc();
  f.scratch = pd.scratchpad_desc();
  return f;
}

std::unique_ptr<ConvPrims> MakeConv(const ConvDesc& d, bool winograd,
                                    const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT: the primitive API reads better unqualified.
  const memory::dims x_dims = {d.batch, d.in_channels, d.in_h, d.in_w};
  const memory::dims w_dims = {d.out_channels, d.in_channels, d.kernel_h,
                               d.kernel_w};
  const memory::dims y_dims = {d.batch, d.out_channels, d.OutH(), d.OutW()};
  const memory::dims strides = {d.stride, d.stride}, pad = {d.pad, d.pad};
  const memory::desc x_any = Plain(x_dims, Tag::any);
  const memory::desc w_any = Plain(w_dims, Tag::any);
  const memory::desc y_any = Plain(y_dims, Tag::any);
  const memory::desc b_md = Plain({d.out_channels}, Tag::x);
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);

  // Each direction takes Winograd where oneDNN has it for this shape and
  // machine, else the direct algorithm.
  const bool try_wino = winograd && WinogradShape(d);
  auto fwd_pd = [&](algorithm alg) {
    return ConvFwdPd(d, alg, /*relu=*/false, e);
  };
  convolution_forward::primitive_desc fpd;
  algorithm falg = algorithm::convolution_direct;
  if (try_wino) {
    try {
      fpd = fwd_pd(algorithm::convolution_winograd);
      falg = algorithm::convolution_winograd;
    } catch (const dnnl::error&) {
    }
  }
  if (falg == algorithm::convolution_direct) {
    fpd = fwd_pd(algorithm::convolution_direct);
  }
  auto data_pd = [&](algorithm alg) {
    return convolution_backward_data::primitive_desc(
        {alg, x_any, w_any, y_any, strides, pad, pad}, attr, e, fpd);
  };
  auto weights_pd = [&](algorithm alg) {
    return convolution_backward_weights::primitive_desc(
        {alg, x_any, w_any, b_md, y_any, strides, pad, pad}, attr, e, fpd);
  };
  convolution_backward_data::primitive_desc dpd;
  convolution_backward_weights::primitive_desc wpd;
  bool dwino = false, wwino = false;
  if (try_wino) {
    try {
      dpd = data_pd(algorithm::convolution_winograd);
      dwino = true;
    } catch (const dnnl::error&) {
    }
    try {
      wpd = weights_pd(algorithm::convolution_winograd);
      wwino = true;
    } catch (const dnnl::error&) {
    }
  }
  if (!dwino) dpd = data_pd(algorithm::convolution_direct);
  if (!wwino) wpd = weights_pd(algorithm::convolution_direct);

  auto c = std::make_unique<ConvPrims>();
  c->algorithms = absl::StrCat(fpd.impl_info_str(), "/", dpd.impl_info_str(),
                               "/", wpd.impl_info_str());
  c->fwd = MakeConvFwd(fpd);
  c->fwd_alg = falg;
  c->bwd_data = convolution_backward_data(dpd);
  c->bwd_weights = convolution_backward_weights(wpd);
  c->x_plain = Plain(x_dims, Tag::nchw);
  c->w_plain = Plain(w_dims, Tag::oihw);
  c->y_plain = Plain(y_dims, Tag::nchw);
  c->b_md = b_md;
  c->d_w = dpd.weights_desc();
  c->d_dy = dpd.diff_dst_desc();
  c->d_dx = dpd.diff_src_desc();
  c->w_x = wpd.src_desc();
  c->w_dy = wpd.diff_dst_desc();
  c->w_dw = wpd.diff_weights_desc();
  c->zero_bias = memory(b_md, e);
  std::memset(c->zero_bias.get_data_handle(), 0, b_md.get_size());
  c->spare_dbias = memory(b_md, e);
  c->scratch_data = dpd.scratchpad_desc();
  c->scratch_weights = wpd.scratchpad_desc();
  c->scratch_bytes =
      std::max({c->fwd.scratch.get_size(), c->scratch_data.get_size(),
                c->scratch_weights.get_size()});
  return c;
}

std::unique_ptr<PoolPrims> MakePool(const PoolDesc& d, dnnl::algorithm alg,
                                    const memory::desc& src_md,
                                    const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  const memory::desc y_any =
      Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::any);
  const memory::dims k = {d.window, d.window};
  const memory::dims strides = {d.Stride(), d.Stride()};
  const memory::dims pad = {d.pad, d.pad};
  // Trailing rows/cols that do not fill a window are dropped: oneDNN's
  // output size (in + 2 pad - window) / stride + 1 rounds down, as
  // PyTorch's. Max pooling skips padded cells; pooling_avg_include_padding
  // divides by window^2 (PyTorch's count_include_pad).
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  pooling_forward::primitive_desc tpd(
      {prop_kind::forward_training, alg, src_md, y_any, strides, k, pad, pad},
      attr, e);
  pooling_backward::primitive_desc bpd(
      {alg, src_md, tpd.dst_desc(), strides, k, pad, pad}, attr, e, tpd);
  auto p = std::make_unique<PoolPrims>();
  p->train = pooling_forward(tpd);
  p->bwd = pooling_backward(bpd);
  p->src = src_md;
  p->dst = tpd.dst_desc();
  if (tpd.workspace_desc().get_size() > 0) {
    p->workspace = memory(tpd.workspace_desc(), e);
  }
  p->scratch_train = tpd.scratchpad_desc();
  p->scratch_bwd = bpd.scratchpad_desc();
  p->scratch_bytes =
      std::max(p->scratch_train.get_size(), p->scratch_bwd.get_size());
  return p;
}

std::unique_ptr<BatchNormPrims> MakeBatchNorm(const BatchNormDesc& d,
                                              const memory::desc& src_md,
                                              const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  const normalization_flags ss =
      normalization_flags::use_scale | normalization_flags::use_shift;
  batch_normalization_forward::primitive_desc tpd(
      {prop_kind::forward_training, src_md, d.eps, ss}, attr, e);
  batch_normalization_forward::primitive_desc ipd(
      {prop_kind::forward_inference, src_md, d.eps,
       ss | normalization_flags::use_global_stats},
      attr, e);
  batch_normalization_backward::primitive_desc bpd(
      {prop_kind::backward, src_md, src_md, d.eps, ss}, attr, e, tpd);
  const normalization_flags relu = normalization_flags::fuse_norm_relu;
  batch_normalization_forward::primitive_desc trpd(
      {prop_kind::forward_training, src_md, d.eps, ss | relu}, attr, e);
  batch_normalization_forward::primitive_desc irpd(
      {prop_kind::forward_inference, src_md, d.eps,
       ss | normalization_flags::use_global_stats | relu},
      attr, e);
  auto p = std::make_unique<BatchNormPrims>();
  p->train = batch_normalization_forward(tpd);
  p->infer = batch_normalization_forward(ipd);
  p->train_relu = batch_normalization_forward(trpd);
  p->infer_relu = batch_normalization_forward(irpd);
  p->relu_workspace = memory(trpd.workspace_desc(), e);
  p->scratch_train_relu = trpd.scratchpad_desc();
  p->scratch_infer_relu = irpd.scratchpad_desc();
  p->bwd = batch_normalization_backward(bpd);
  p->src = src_md;
  p->stat = Plain({d.channels}, Tag::x);
  p->variance = memory(p->stat, e);
  p->unused_shift = memory(p->stat, e);
  std::memset(p->unused_shift.get_data_handle(), 0, p->stat.get_size());
  p->scratch_train = tpd.scratchpad_desc();
  p->scratch_infer = ipd.scratchpad_desc();
  p->scratch_bwd = bpd.scratchpad_desc();
  p->scratch_bytes =
      std::max({p->scratch_train.get_size(), p->scratch_infer.get_size(),
                p->scratch_bwd.get_size(), trpd.scratchpad_desc().get_size(),
                irpd.scratchpad_desc().get_size()});
  return p;
}

std::unique_ptr<ReluPrims> MakeRelu(int64_t n, const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  const memory::desc md = Plain({static_cast<memory::dim>(n)}, Tag::x);
  eltwise_forward::primitive_desc fpd(
      {prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, md,
       0.f, 0.f},
      e);
  eltwise_backward::primitive_desc bpd(
      {algorithm::eltwise_relu_use_dst_for_bwd, md, md, 0.f, 0.f}, e, fpd);
  auto r = std::make_unique<ReluPrims>();
  r->fwd = eltwise_forward(fpd);
  r->bwd = eltwise_backward(bpd);
  r->md = md;
  return r;
}

}  // namespace

absl::StatusOr<ConvPrims*> PrimitiveCache::Conv(const ConvDesc& d,
                                                const char* op) {
  if (absl::Status s = ValidateConv(d, op); !s.ok()) return s;
  const ConvKey key = {d.batch,    d.in_channels,  d.in_h,
                       d.in_w,     d.out_channels, d.kernel_h,
                       d.kernel_w, d.stride,       d.pad};
  std::unique_ptr<ConvPrims>& c = convs_[key];
  if (c == nullptr) {
    absl::Status s = Guard(op, [&] {
      c = MakeConv(d, winograd_, ctx_->engine());
      return absl::OkStatus();
    });
    if (!s.ok()) {
      convs_.erase(key);
      return s;
    }
  }
  return c.get();
}

ConvFwd* PrimitiveCache::FusedRelu(const ConvDesc& d, ConvPrims& p) {
  if (p.fwd_relu_tried) return p.fwd_relu.get();
  p.fwd_relu_tried = true;
  try {
    const dnnl::convolution_forward::primitive_desc pd =
        ConvFwdPd(d, p.fwd_alg, /*relu=*/true, ctx_->engine());
    if (pd.impl_info_str() != p.fwd.impl) return nullptr;
    p.fwd_relu = std::make_unique<ConvFwd>(MakeConvFwd(pd));
  } catch (const dnnl::error&) {
    return nullptr;  // No fused kernel for this shape on this machine.
  }
  p.scratch_bytes = std::max(p.scratch_bytes, p.fwd_relu->scratch.get_size());
  return p.fwd_relu.get();
}

absl::StatusOr<PoolPrims*> PrimitiveCache::Pool(const PoolDesc& d,
                                                dnnl::algorithm alg,
                                                const memory::desc& src,
                                                const char* op) {
  const PoolKey key = {d.batch,    d.channels, d.in_h, d.in_w,
                       d.window,   d.Stride(), d.pad,  static_cast<int>(alg)};
  std::vector<std::unique_ptr<PoolPrims>>& list = pools_[key];
  for (auto& p : list) {
    if (p->src == src) return p.get();
  }
  std::unique_ptr<PoolPrims> p;
  DP_RETURN_IF_ERROR(Guard(op, [&] {
    p = MakePool(d, alg, src, ctx_->engine());
    return absl::OkStatus();
  }));
  list.push_back(std::move(p));
  return list.back().get();
}

PoolPrims* PrimitiveCache::FindPoolByOutput(const PoolDesc& d,
                                            dnnl::algorithm alg,
                                            const memory::desc& dst) {
  auto it = pools_.find(PoolKey{d.batch, d.channels, d.in_h, d.in_w, d.window,
                                d.Stride(), d.pad, static_cast<int>(alg)});
  if (it == pools_.end()) return nullptr;
  for (auto& p : it->second) {
    if (p->dst == dst) return p.get();
  }
  return nullptr;
}

absl::StatusOr<BatchNormPrims*> PrimitiveCache::BatchNorm(
    const BatchNormDesc& d, const memory::desc& src, const char* op) {
  uint32_t eps_bits = 0;
  std::memcpy(&eps_bits, &d.eps, sizeof(eps_bits));
  const BatchNormKey key = {d.batch, d.channels, d.spatial, eps_bits};
  std::vector<std::unique_ptr<BatchNormPrims>>& list = norms_[key];
  for (auto& p : list) {
    if (p->src == src) return p.get();
  }
  std::unique_ptr<BatchNormPrims> p;
  DP_RETURN_IF_ERROR(Guard(op, [&] {
    p = MakeBatchNorm(d, src, ctx_->engine());
    return absl::OkStatus();
  }));
  list.push_back(std::move(p));
  return list.back().get();
}

ReluPrims* PrimitiveCache::Relu(int64_t n) {
  std::unique_ptr<ReluPrims>& r = relus_[n];
  if (r == nullptr) r = MakeRelu(n, ctx_->engine());
  return r.get();
}

void PrimitiveCache::SetWorkspace(PoolPrims& p, const float* x,
                                  const float* y) {
  if (p.ws_x == nullptr) ++workspaces_;
  p.ws_x = x;
  p.ws_y = y;
}

void PrimitiveCache::ClearWorkspace(PoolPrims& p) {
  if (p.ws_x != nullptr) --workspaces_;
  p.ws_x = p.ws_y = nullptr;
}

void PrimitiveCache::ClearWorkspacesOverlapping(const void* p, size_t bytes) {
  if (workspaces_ == 0) return;
  const uintptr_t lo = Addr(p), hi = lo + bytes;
  for (auto& [key, list] : pools_) {
    for (auto& pp : list) {
      if (pp->ws_x == nullptr) continue;
      const uintptr_t x = Addr(pp->ws_x), y = Addr(pp->ws_y);
      const uintptr_t xe = x + pp->src.get_size(), ye = y + pp->dst.get_size();
      if ((x < hi && xe > lo) || (y < hi && ye > lo)) ClearWorkspace(*pp);
    }
  }
}

void PrimitiveCache::ClearWorkspacesStartingIn(const void* p, size_t bytes) {
  const uintptr_t lo = Addr(p), hi = lo + bytes;
  for (auto& [key, list] : pools_) {
    for (auto& pp : list) {
      if (pp->ws_x == nullptr) continue;
      if ((Addr(pp->ws_x) >= lo && Addr(pp->ws_x) < hi) ||
          (Addr(pp->ws_y) >= lo && Addr(pp->ws_y) < hi)) {
        ClearWorkspace(*pp);
      }
    }
  }
}

}  // namespace onednn
}  // namespace downpour
