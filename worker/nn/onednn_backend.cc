// File: worker/nn/onednn_backend.cc (see onednn_backend.h).
//
// The oneDNN backend's memory, layout helpers, GEMM, convolutions and ReLU
// (the class: onednn_backend_impl.h; pooling, batch normalization and the
// small elementwise ops: onednn_norm_pool.cc). The pieces it is built from
// have units of their own: onednn_context.h (engine, stream, reorders,
// scratchpad), onednn_layouts.h (which buffers hold a blocked layout) and
// onednn_primitives.h (the primitives per shape, pooling workspaces).
#include "worker/nn/onednn_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/onednn_backend_impl.h"
#include "worker/nn/onednn_context.h"
#include "worker/nn/onednn_layouts.h"
#include "worker/nn/onednn_primitives.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// 64-byte aligned, zero-filled allocation of n floats (n may be 0).
float* AlignedZeroAlloc(int64_t n) {
  constexpr size_t kAlignment = 64;
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

}  // namespace

absl::StatusOr<float*> OnednnBackend::Allocate(int64_t n) {
  if (absl::Status s = ValidateAllocation(n); !s.ok()) return s;
  float* p = AlignedZeroAlloc(n);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Allocate: out of memory for ", n, " floats"));
  }
  allocations_[p] = n;
  return p;
}

void* OnednnBackend::Input(const float* p, const memory::desc& plain,
                           const memory::desc& want,
                           std::unique_ptr<memory>& spare) {
  const memory::desc have = layouts_.LayoutOf(p, plain);
  if (have == want) return const_cast<float*>(p);
  memory& s = Spare(spare, want, ctx_.engine());
  ctx_.Reorder(have, p, want, s.get_data_handle());
  return s.get_data_handle();
}

void* OnednnBackend::Output(float* p, const memory::desc& plain,
                            const memory::desc& want,
                            std::unique_ptr<memory>& spare) {
  OverwriteOrThrow(p, static_cast<int64_t>(plain.get_size() / 4));
  if (want.get_size() == plain.get_size()) return p;
  return Spare(spare, want, ctx_.engine()).get_data_handle();
}

void OnednnBackend::FinishOutput(float* p, const memory::desc& plain,
                                 const memory::desc& want,
                                 std::unique_ptr<memory>& spare) {
  if (want.get_size() == plain.get_size()) {
    if (want != plain) layouts_.Set(p, want);
  } else {
    ctx_.Reorder(want, spare->get_data_handle(), plain, p);
  }
}

// ---- Memory -----------------------------------------------------------------

absl::Status OnednnBackend::CopyToDevice(const float* host_src, float* dst,
                                         int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("CopyToDevice: negative size");
  DP_RETURN_IF_ERROR(Overwrite(dst, n));
  if (n > 0 && host_src != dst) std::memcpy(dst, host_src, Bytes(n));
  return absl::OkStatus();
}

absl::Status OnednnBackend::CopyToHost(const float* src, float* host_dst,
                                       int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("CopyToHost: negative size");
  return Guard("CopyToHost", [&] {
    if (const memory::desc* md = layouts_.Find(src, Bytes(n))) {
      // The model's edge: the backend's layout back to the interface's.
      ctx_.Reorder(*md, src, PlainOf(*md), host_dst);
      return absl::OkStatus();
    }
    layouts_.ReadPlain(src, n);
    if (n > 0) std::memcpy(host_dst, src, Bytes(n));
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Copy(const float* src, float* dst, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("Copy: negative size");
  if (src == dst || n == 0) return absl::OkStatus();
  return Guard("Copy", [&] {
    if (const memory::desc* found = layouts_.Find(src, Bytes(n))) {
      // A tensor in a layout of its own (without padding: it fills exactly
      // n floats) is copied as it is and keeps that layout, so a residual
      // sum or a branch's gradient does not convert it to plain and back.
      const memory::desc md = *found;
      OverwriteOrThrow(dst, n);
      std::memcpy(dst, src, Bytes(n));
      layouts_.Set(dst, md);
      return absl::OkStatus();
    }
    layouts_.ReadPlain(src, n);
    OverwriteOrThrow(dst, n);
    std::memmove(dst, src, Bytes(n));
    return absl::OkStatus();
  });
}

// ---- Operations -------------------------------------------------------------

absl::Status OnednnBackend::Gemm(bool trans_a, bool trans_b, int m, int n,
                                 int k, float alpha, const float* a,
                                 const float* b, float beta, float* c) {
  if (absl::Status s = ValidateGemm(m, n, k); !s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  DP_RETURN_IF_ERROR(ReadPlain(a, int64_t{m} * k));
  DP_RETURN_IF_ERROR(ReadPlain(b, int64_t{k} * n));
  if (beta == 0.f) {
    DP_RETURN_IF_ERROR(Overwrite(c, int64_t{m} * n));
  } else {
    DP_RETURN_IF_ERROR(ReadPlain(c, int64_t{m} * n));
  }
  if (k == 0) {
    // An empty sum: c = beta * c, as BLAS defines it (dnnl_sgemm refuses or
    // skips this case).
    const int64_t mn = int64_t{m} * n;
    for (int64_t i = 0; i < mn; ++i) c[i] = beta == 0.f ? 0.f : beta * c[i];
    return absl::OkStatus();
  }
  EnterOp();
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                 trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
  if (st != dnnl_success) {
    return absl::InternalError(
        absl::StrCat("Gemm: dnnl_sgemm failed with status ", st));
  }
  return absl::OkStatus();
}

absl::Status OnednnBackend::RunConvForward(ConvPrims& p, ConvFwd& f,
                                           const ConvDesc& d, const float* x,
                                           const float* w, const float* b,
                                           float* y, const char* op) {
  return Guard(op, [&] {
    if (b != nullptr) layouts_.ReadPlain(b, d.out_channels);
    const dnnl::engine& e = ctx_.engine();
    memory bias =
        b != nullptr ? memory(p.b_md, e, const_cast<float*>(b)) : p.zero_bias;
    void* src = Input(x, p.x_plain, f.x, f.x_buf);
    void* wei = Input(w, p.w_plain, f.w, f.w_buf);
    void* dst = Output(y, p.y_plain, f.y, f.y_buf);
    f.prim.execute(ctx_.stream(), {{DNNL_ARG_SRC, memory(f.x, e, src)},
                                   {DNNL_ARG_WEIGHTS, memory(f.w, e, wei)},
                                   {DNNL_ARG_BIAS, bias},
                                   {DNNL_ARG_DST, memory(f.y, e, dst)},
                                   {DNNL_ARG_SCRATCHPAD,
                                    ctx_.Scratch(f.scratch, p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(y, p.y_plain, f.y, f.y_buf);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Conv2dForward(const ConvDesc& d, const float* x,
                                          const float* w, const float* b,
                                          float* y) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = prims_.Conv(d, "Conv2dForward");
  if (!c.ok()) return c.status();
  return RunConvForward(**c, (*c)->fwd, d, x, w, b, y, "Conv2dForward");
}

absl::Status OnednnBackend::Conv2dReluForward(const ConvDesc& d, const float* x,
                                              const float* w, const float* b,
                                              float* y) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = prims_.Conv(d, "Conv2dReluForward");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  if (ConvFwd* fused = prims_.FusedRelu(d, p)) {
    return RunConvForward(p, *fused, d, x, w, b, y, "Conv2dReluForward");
  }
  DP_RETURN_IF_ERROR(
      RunConvForward(p, p.fwd, d, x, w, b, y, "Conv2dReluForward"));
  return ReluForward(static_cast<int64_t>(p.y_plain.get_size() / 4), y, y);
}

absl::Status OnednnBackend::Conv2dBackwardData(const ConvDesc& d,
                                               const float* w, const float* dy,
                                               float* dx) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = prims_.Conv(d, "Conv2dBackwardData");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dBackwardData", [&] {
    const dnnl::engine& e = ctx_.engine();
    void* wei = Input(w, p.w_plain, p.d_w, p.d_w_buf);
    void* ddst = Input(dy, p.y_plain, p.d_dy, p.d_dy_buf);
    void* dsrc = Output(dx, p.x_plain, p.d_dx, p.d_dx_buf);
    p.bwd_data.execute(
        ctx_.stream(),
        {{DNNL_ARG_WEIGHTS, memory(p.d_w, e, wei)},
         {DNNL_ARG_DIFF_DST, memory(p.d_dy, e, ddst)},
         {DNNL_ARG_DIFF_SRC, memory(p.d_dx, e, dsrc)},
         {DNNL_ARG_SCRATCHPAD, ctx_.Scratch(p.scratch_data, p.scratch_bytes)}});
    ctx_.stream().wait();
    FinishOutput(dx, p.x_plain, p.d_dx, p.d_dx_buf);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Conv2dBackwardFilter(const ConvDesc& d,
                                                 const float* x,
                                                 const float* dy, float* dw,
                                                 float* db) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = prims_.Conv(d, "Conv2dBackwardFilter");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dBackwardFilter", [&] {
    const dnnl::engine& e = ctx_.engine();
    void* src = Input(x, p.x_plain, p.w_x, p.w_x_buf);
    void* ddst = Input(dy, p.y_plain, p.w_dy, p.w_dy_buf);
    // Weight gradients go to the flat gradient buffer in the plain OIHW
    // layout the parameter servers shard.
    OverwriteOrThrow(dw, p.w_plain.get_size() / 4);
    void* dwei = p.w_dw == p.w_plain
                     ? static_cast<void*>(dw)
                     : Spare(p.w_dw_buf, p.w_dw, e).get_data_handle();
    memory dbias = p.spare_dbias;
    if (db != nullptr) {
      OverwriteOrThrow(db, d.out_channels);
      dbias = memory(p.b_md, e, db);
    }
    p.bwd_weights.execute(ctx_.stream(),
                          {{DNNL_ARG_SRC, memory(p.w_x, e, src)},
                           {DNNL_ARG_DIFF_DST, memory(p.w_dy, e, ddst)},
                           {DNNL_ARG_DIFF_WEIGHTS, memory(p.w_dw, e, dwei)},
                           {DNNL_ARG_DIFF_BIAS, dbias},
                           {DNNL_ARG_SCRATCHPAD,
                            ctx_.Scratch(p.scratch_weights, p.scratch_bytes)}});
    ctx_.stream().wait();
    if (dwei != dw) ctx_.Reorder(p.w_dw, dwei, p.w_plain, dw);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::ReluForward(int64_t n, const float* x, float* y) {
  if (n < 0) return absl::InvalidArgumentError("ReluForward: negative size");
  if (n == 0) return absl::OkStatus();
  EnterOp();
  return Guard("ReluForward", [&] {
    // Elementwise: any layout without padding is kept as it is.
    memory::desc md;
    bool blocked = false;
    if (const memory::desc* found = layouts_.Find(x, Bytes(n))) {
      md = *found;
      blocked = true;
    } else {
      layouts_.ReadPlain(x, n);
    }
    OverwriteOrThrow(y, n);
    ReluPrims* r = prims_.Relu(n);
    const dnnl::engine& e = ctx_.engine();
    r->fwd.execute(ctx_.stream(),
                   {{DNNL_ARG_SRC, memory(r->md, e, const_cast<float*>(x))},
                    {DNNL_ARG_DST, memory(r->md, e, y)}});
    ctx_.stream().wait();
    if (blocked) layouts_.Set(y, md);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::ReluBackward(int64_t n, const float* y,
                                         const float* dy, float* dx) {
  if (n < 0) return absl::InvalidArgumentError("ReluBackward: negative size");
  if (n == 0) return absl::OkStatus();
  EnterOp();
  return Guard("ReluBackward", [&] {
    const memory::desc* y_md = layouts_.Find(y, Bytes(n));
    const memory::desc* dy_md = layouts_.Find(dy, Bytes(n));
    memory::desc md;
    bool blocked = false;
    if (y_md != nullptr && dy_md != nullptr && *y_md == *dy_md) {
      md = *y_md;
      blocked = true;
    } else {
      layouts_.ReadPlain(y, n);
      layouts_.ReadPlain(dy, n);
    }
    OverwriteOrThrow(dx, n);
    ReluPrims* r = prims_.Relu(n);
    const dnnl::engine& e = ctx_.engine();
    r->bwd.execute(
        ctx_.stream(),
        {{DNNL_ARG_DST, memory(r->md, e, const_cast<float*>(y))},
         {DNNL_ARG_DIFF_DST, memory(r->md, e, const_cast<float*>(dy))},
         {DNNL_ARG_DIFF_SRC, memory(r->md, e, dx)}});
    ctx_.stream().wait();
    if (blocked) layouts_.Set(dx, md);
    return absl::OkStatus();
  });
}

}  // namespace onednn

absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(
    const OnednnOptions& options) {
  OnednnOptions o = options;
  if (o.threads <= 0) o.threads = 1;
  try {
    // The loops run on the calling thread only: oneDNN's OpenMP threads
    // keep spinning for a while after each primitive, and helper threads of
    // the loops' own pool would compete with them for the same cores.
    return std::unique_ptr<Backend>(
        new onednn::OnednnBackend(o, NewOpenblasBackend(1)));
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("oneDNN: cannot create a CPU engine: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(int num_threads) {
  OnednnOptions o;
  o.threads = num_threads;
  return NewOnednnBackend(o);
}

}  // namespace downpour
