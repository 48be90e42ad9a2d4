// File: worker/nn/onednn_backend.cc (see onednn_backend.h).
#include "worker/nn/onednn_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace downpour {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;
using ArgMap = std::unordered_map<int, memory>;

// Runs f, turning a oneDNN exception into Internal naming the operation.
template <typename F>
absl::Status Guard(const char* op, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(op, ": oneDNN error ",
                                            static_cast<int>(e.status), ": ",
                                            e.what()));
  }
}

memory::desc Plain(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, Dt::f32, tag);
}

// One tensor argument of a primitive: the caller's plain buffer (its handle
// set per call) and, when the primitive prefers another layout, a buffer of
// that layout owned here plus the reorders between the two, created once.
class LayoutArg {
 public:
  LayoutArg(const memory::desc& user, const memory::desc& inner,
            const dnnl::engine& eng)
      : user_(user, eng, DNNL_MEMORY_NONE), same_(user == inner) {
    if (!same_) {
      inner_ = memory(inner, eng);
      to_inner_ = dnnl::reorder(user_, inner_);
      to_user_ = dnnl::reorder(inner_, user_);
    }
  }
  // The primitive's view of the input at `p` (reordered into it if needed).
  memory& In(const float* p, dnnl::stream& s) {
    user_.set_data_handle(const_cast<float*>(p));
    if (same_) return user_;
    to_inner_.execute(s, user_, inner_);
    return inner_;
  }
  // The memory a primitive writes the output at `p` to; call Finish after.
  memory& Out(float* p) {
    user_.set_data_handle(p);
    return same_ ? user_ : inner_;
  }
  void Finish(dnnl::stream& s) {
    if (!same_) to_user_.execute(s, inner_, user_);
  }

 private:
  memory user_;
  memory inner_;
  bool same_;
  dnnl::reorder to_inner_, to_user_;
};

using ConvKey = std::array<int, 9>;
ConvKey KeyOf(const ConvDesc& d) {
  return {d.batch,    d.in_channels, d.in_h,   d.in_w, d.out_channels,
          d.kernel_h, d.kernel_w,    d.stride, d.pad};
}

// The three convolution primitives of one shape and their arguments.
struct ConvPrims {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  size_t scratch_bytes = 0;
  // Forward: x, w, y. Backward data: w, dy, dx. Backward weights: x, dy, dw.
  std::unique_ptr<LayoutArg> f_x, f_w, f_y, d_w, d_dy, d_dx, w_x, w_dy, w_dw;
  memory bias, dbias, zero_bias, spare_dbias;
  memory::desc scratch_fwd, scratch_data, scratch_weights;
};

std::unique_ptr<ConvPrims> MakeConv(const ConvDesc& d, const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT: the primitive API reads better unqualified.
  const memory::dims x_dims = {d.batch, d.in_channels, d.in_h, d.in_w};
  const memory::dims w_dims = {d.out_channels, d.in_channels, d.kernel_h,
                               d.kernel_w};
  const memory::dims y_dims = {d.batch, d.out_channels, d.OutH(), d.OutW()};
  const memory::dims b_dims = {d.out_channels};
  const memory::dims strides = {d.stride, d.stride}, pad = {d.pad, d.pad};
  const memory::desc x_any = Plain(x_dims, Tag::any);
  const memory::desc w_any = Plain(w_dims, Tag::any);
  const memory::desc y_any = Plain(y_dims, Tag::any);
  const memory::desc b_md = Plain(b_dims, Tag::x);
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);

  convolution_forward::primitive_desc fpd(
      {prop_kind::forward_training, algorithm::convolution_direct, x_any, w_any,
       b_md, y_any, strides, pad, pad},
      attr, e);
  convolution_backward_data::primitive_desc dpd(
      {algorithm::convolution_direct, x_any, w_any, y_any, strides, pad, pad},
      attr, e, fpd);
  convolution_backward_weights::primitive_desc wpd(
      {algorithm::convolution_direct, x_any, w_any, b_md, y_any, strides, pad,
       pad},
      attr, e, fpd);

  auto c = std::make_unique<ConvPrims>();
  c->fwd = convolution_forward(fpd);
  c->bwd_data = convolution_backward_data(dpd);
  c->bwd_weights = convolution_backward_weights(wpd);
  const memory::desc x_u = Plain(x_dims, Tag::nchw);
  const memory::desc w_u = Plain(w_dims, Tag::oihw);
  const memory::desc y_u = Plain(y_dims, Tag::nchw);
  auto arg = [&](const memory::desc& u, const memory::desc& inner) {
    return std::make_unique<LayoutArg>(u, inner, e);
  };
  c->f_x = arg(x_u, fpd.src_desc());
  c->f_w = arg(w_u, fpd.weights_desc());
  c->f_y = arg(y_u, fpd.dst_desc());
  c->d_w = arg(w_u, dpd.weights_desc());
  c->d_dy = arg(y_u, dpd.diff_dst_desc());
  c->d_dx = arg(x_u, dpd.diff_src_desc());
  c->w_x = arg(x_u, wpd.src_desc());
  c->w_dy = arg(y_u, wpd.diff_dst_desc());
  c->w_dw = arg(w_u, wpd.diff_weights_desc());
  c->bias = memory(b_md, e, DNNL_MEMORY_NONE);
  c->dbias = memory(b_md, e, DNNL_MEMORY_NONE);
  c->zero_bias = memory(b_md, e);
  std::memset(c->zero_bias.get_data_handle(), 0, sizeof(float) * d.out_channels);
  c->spare_dbias = memory(b_md, e);
  c->scratch_fwd = fpd.scratchpad_desc();
  c->scratch_data = dpd.scratchpad_desc();
  c->scratch_weights = wpd.scratchpad_desc();
  c->scratch_bytes = std::max({c->scratch_fwd.get_size(),
                               c->scratch_data.get_size(),
                               c->scratch_weights.get_size()});
  return c;
}

using PoolKey = std::array<int, 5>;

// Max pooling of one shape on plain NCHW memory: the training forward (which
// also writes the workspace of argmax positions) and the backward.
struct PoolPrims {
  dnnl::pooling_forward train;
  dnnl::pooling_backward bwd;
  memory x, y, dy, dx, spare_y, workspace;
  // The buffers of the last training forward, whose argmax positions the
  // workspace holds (the interface's contract: Backward gets Forward's x and
  // y, unchanged), so a Backward on them needs no second forward pass.
  const float* ws_x = nullptr;
  const float* ws_y = nullptr;
  memory::desc scratch_train, scratch_bwd;
  size_t scratch_bytes = 0;
};

std::unique_ptr<PoolPrims> MakePool(const PoolDesc& d, const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  const memory::desc x_md =
      Plain({d.batch, d.channels, d.in_h, d.in_w}, Tag::nchw);
  const memory::desc y_md =
      Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::nchw);
  const memory::dims k = {d.window, d.window}, zero = {0, 0};
  // Trailing rows/cols that do not fill a window are dropped: oneDNN's
  // output size (in - window + pad) / window + 1 rounds down, as PyTorch's.
  const memory::dims pad_r = zero;
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  pooling_forward::primitive_desc tpd(
      {prop_kind::forward_training, algorithm::pooling_max, x_md, y_md, k, k,
       zero, pad_r},
      attr, e);
  pooling_backward::primitive_desc bpd(
      {algorithm::pooling_max, x_md, y_md, k, k, zero, pad_r}, attr, e, tpd);
  auto p = std::make_unique<PoolPrims>();
  p->train = pooling_forward(tpd);
  p->bwd = pooling_backward(bpd);
  p->x = memory(x_md, e, DNNL_MEMORY_NONE);
  p->dx = memory(x_md, e, DNNL_MEMORY_NONE);
  p->y = memory(y_md, e, DNNL_MEMORY_NONE);
  p->dy = memory(y_md, e, DNNL_MEMORY_NONE);
  p->spare_y = memory(y_md, e);
  p->workspace = memory(tpd.workspace_desc(), e);
  p->scratch_train = tpd.scratchpad_desc();
  p->scratch_bwd = bpd.scratchpad_desc();
  p->scratch_bytes =
      std::max(p->scratch_train.get_size(), p->scratch_bwd.get_size());
  return p;
}

class OnednnBackend : public Backend {
 public:
  OnednnBackend(int threads, std::unique_ptr<Backend> loops)
      : threads_(threads),
        loops_(std::move(loops)),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {}

  std::string Name() const override { return "cpu (onednn)"; }

  // ---- Memory, elementwise, loss: the OpenBLAS backend's loops. ----------
  absl::StatusOr<float*> Allocate(int64_t n) override {
    return loops_->Allocate(n);
  }
  void Free(float* p) override { loops_->Free(p); }
  absl::Status CopyToDevice(const float* host_src, float* dst,
                            int64_t n) override {
    return loops_->CopyToDevice(host_src, dst, n);
  }
  absl::Status CopyToHost(const float* src, float* host_dst,
                          int64_t n) override {
    return loops_->CopyToHost(src, host_dst, n);
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status Copy(const float* src, float* dst, int64_t n) override {
    return loops_->Copy(src, dst, n);
  }
  absl::Status Fill(float* x, int64_t n, float value) override {
    return loops_->Fill(x, n, value);
  }
  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override {
    return loops_->Axpy(n, alpha, x, y);
  }
  absl::Status AddRowBias(int rows, int cols, const float* bias,
                          float* y) override {
    return loops_->AddRowBias(rows, cols, bias, y);
  }
  absl::Status ColumnSum(int rows, int cols, const float* dy,
                         float* db) override {
    return loops_->ColumnSum(rows, cols, dy, db);
  }
  absl::Status ReluForward(int64_t n, const float* x, float* y) override {
    return loops_->ReluForward(n, x, y);
  }
  absl::Status ReluBackward(int64_t n, const float* y, const float* dy,
                            float* dx) override {
    return loops_->ReluBackward(n, y, dy, dx);
  }
  absl::Status SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                   const float* labels, float* dlogits,
                                   float* host_loss,
                                   int64_t* host_correct) override {
    return loops_->SoftmaxCrossEntropy(batch, classes, logits, labels, dlogits,
                                       host_loss, host_correct);
  }

  // ---- oneDNN -------------------------------------------------------------
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) override;
  absl::Status Conv2dForward(const ConvDesc& d, const float* x, const float* w,
                             const float* b, float* y) override;
  absl::Status Conv2dBackwardData(const ConvDesc& d, const float* w,
                                  const float* dy, float* dx) override;
  absl::Status Conv2dBackwardFilter(const ConvDesc& d, const float* x,
                                    const float* dy, float* dw,
                                    float* db) override;
  absl::Status MaxPoolForward(const PoolDesc& d, const float* x,
                              float* y) override;
  absl::Status MaxPoolBackward(const PoolDesc& d, const float* x,
                               const float* y, const float* dy,
                               float* dx) override;

 private:
  // Sets this thread's OpenMP thread count (a per-thread setting). oneDNN
  // reads it both when a primitive is created (its work split) and when it
  // runs, so it is set before either.
  void EnterOp() const { omp_set_num_threads(threads_); }
  absl::StatusOr<ConvPrims*> Conv(const ConvDesc& d, const char* op);
  absl::StatusOr<PoolPrims*> Pool(const PoolDesc& d, const char* op);
  // The scratchpad as `desc` (grown to at least `bytes` first).
  memory Scratch(const memory::desc& desc, size_t bytes);

  const int threads_;
  std::unique_ptr<Backend> loops_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<ConvKey, std::unique_ptr<ConvPrims>> convs_;
  std::map<PoolKey, std::unique_ptr<PoolPrims>> pools_;
  std::unique_ptr<memory> scratch_;  // u8 buffer, only grown.
  size_t scratch_size_ = 0;
};

memory OnednnBackend::Scratch(const memory::desc& desc, size_t bytes) {
  if (bytes > scratch_size_ || scratch_ == nullptr) {
    const memory::dim n = static_cast<memory::dim>(std::max<size_t>(bytes, 64));
    scratch_ = std::make_unique<memory>(
        memory::desc({n}, Dt::u8, Tag::x), engine_);
    scratch_size_ = static_cast<size_t>(n);
  }
  return memory(desc, engine_, scratch_->get_data_handle());
}

absl::StatusOr<ConvPrims*> OnednnBackend::Conv(const ConvDesc& d,
                                               const char* op) {
  if (absl::Status s = ValidateConv(d, op); !s.ok()) return s;
  std::unique_ptr<ConvPrims>& c = convs_[KeyOf(d)];
  if (c == nullptr) {
    absl::Status s = Guard(op, [&] {
      c = MakeConv(d, engine_);
      return absl::OkStatus();
    });
    if (!s.ok()) {
      convs_.erase(KeyOf(d));
      return s;
    }
  }
  return c.get();
}

absl::StatusOr<PoolPrims*> OnednnBackend::Pool(const PoolDesc& d,
                                               const char* op) {
  if (absl::Status s = ValidatePool(d, op); !s.ok()) return s;
  const PoolKey key = {d.batch, d.channels, d.in_h, d.in_w, d.window};
  std::unique_ptr<PoolPrims>& p = pools_[key];
  if (p == nullptr) {
    absl::Status s = Guard(op, [&] {
      p = MakePool(d, engine_);
      return absl::OkStatus();
    });
    if (!s.ok()) {
      pools_.erase(key);
      return s;
    }
  }
  return p.get();
}

absl::Status OnednnBackend::Gemm(bool trans_a, bool trans_b, int m, int n,
                                 int k, float alpha, const float* a,
                                 const float* b, float beta, float* c) {
  if (absl::Status s = ValidateGemm(m, n, k); !s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  EnterOp();
  const dnnl_status_t st = dnnl_sgemm(
      trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
      trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
  if (st != dnnl_success) {
    return absl::InternalError(
        absl::StrCat("Gemm: dnnl_sgemm failed with status ", st));
  }
  return absl::OkStatus();
}

absl::Status OnednnBackend::Conv2dForward(const ConvDesc& d, const float* x,
                                          const float* w, const float* b,
                                          float* y) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dForward");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dForward", [&] {
    memory* bias = &p.zero_bias;
    if (b != nullptr) {
      p.bias.set_data_handle(const_cast<float*>(b));
      bias = &p.bias;
    }
    ArgMap args = {{DNNL_ARG_SRC, p.f_x->In(x, stream_)},
                   {DNNL_ARG_WEIGHTS, p.f_w->In(w, stream_)},
                   {DNNL_ARG_BIAS, *bias},
                   {DNNL_ARG_DST, p.f_y->Out(y)},
                   {DNNL_ARG_SCRATCHPAD,
                    Scratch(p.scratch_fwd, p.scratch_bytes)}};
    p.fwd.execute(stream_, args);
    p.f_y->Finish(stream_);
    stream_.wait();
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Conv2dBackwardData(const ConvDesc& d,
                                               const float* w, const float* dy,
                                               float* dx) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dBackwardData");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dBackwardData", [&] {
    ArgMap args = {{DNNL_ARG_WEIGHTS, p.d_w->In(w, stream_)},
                   {DNNL_ARG_DIFF_DST, p.d_dy->In(dy, stream_)},
                   {DNNL_ARG_DIFF_SRC, p.d_dx->Out(dx)},
                   {DNNL_ARG_SCRATCHPAD,
                    Scratch(p.scratch_data, p.scratch_bytes)}};
    p.bwd_data.execute(stream_, args);
    p.d_dx->Finish(stream_);
    stream_.wait();
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Conv2dBackwardFilter(const ConvDesc& d,
                                                 const float* x,
                                                 const float* dy, float* dw,
                                                 float* db) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dBackwardFilter");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dBackwardFilter", [&] {
    memory* dbias = &p.spare_dbias;
    if (db != nullptr) {
      p.dbias.set_data_handle(db);
      dbias = &p.dbias;
    }
    ArgMap args = {{DNNL_ARG_SRC, p.w_x->In(x, stream_)},
                   {DNNL_ARG_DIFF_DST, p.w_dy->In(dy, stream_)},
                   {DNNL_ARG_DIFF_WEIGHTS, p.w_dw->Out(dw)},
                   {DNNL_ARG_DIFF_BIAS, *dbias},
                   {DNNL_ARG_SCRATCHPAD,
                    Scratch(p.scratch_weights, p.scratch_bytes)}};
    p.bwd_weights.execute(stream_, args);
    p.w_dw->Finish(stream_);
    stream_.wait();
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::MaxPoolForward(const PoolDesc& d, const float* x,
                                           float* y) {
  EnterOp();  // Before Pool(): see Conv2dForward.
  absl::StatusOr<PoolPrims*> pp = Pool(d, "MaxPoolForward");
  if (!pp.ok()) return pp.status();
  PoolPrims& p = **pp;
  return Guard("MaxPoolForward", [&] {
    p.x.set_data_handle(const_cast<float*>(x));
    p.y.set_data_handle(y);
    // The training forward also records the argmax workspace; it costs the
    // same memory traffic as inference plus one byte per output.
    p.train.execute(stream_, {{DNNL_ARG_SRC, p.x},
                              {DNNL_ARG_DST, p.y},
                              {DNNL_ARG_WORKSPACE, p.workspace},
                              {DNNL_ARG_SCRATCHPAD,
                               Scratch(p.scratch_train, p.scratch_bytes)}});
    stream_.wait();
    p.ws_x = x;
    p.ws_y = y;
    return absl::OkStatus();
  });
}

// oneDNN's max-pool backward routes dy through the argmax workspace of a
// training forward. When the last forward of this shape was on these x and y
// its workspace is used; otherwise the forward runs again here (a cheap,
// memory-bound pass) into a spare output.
absl::Status OnednnBackend::MaxPoolBackward(const PoolDesc& d, const float* x,
                                            const float* y, const float* dy,
                                            float* dx) {
  EnterOp();  // Before Pool(): see Conv2dForward.
  absl::StatusOr<PoolPrims*> pp = Pool(d, "MaxPoolBackward");
  if (!pp.ok()) return pp.status();
  PoolPrims& p = **pp;
  return Guard("MaxPoolBackward", [&] {
    if (p.ws_x != x || p.ws_y != y) {
      p.x.set_data_handle(const_cast<float*>(x));
      p.train.execute(stream_,
                      {{DNNL_ARG_SRC, p.x},
                       {DNNL_ARG_DST, p.spare_y},
                       {DNNL_ARG_WORKSPACE, p.workspace},
                       {DNNL_ARG_SCRATCHPAD,
                        Scratch(p.scratch_train, p.scratch_bytes)}});
      p.ws_x = x;
      p.ws_y = nullptr;  // The workspace is of spare_y's forward.
    }
    p.dy.set_data_handle(const_cast<float*>(dy));
    p.dx.set_data_handle(dx);
    p.bwd.execute(stream_, {{DNNL_ARG_DIFF_DST, p.dy},
                            {DNNL_ARG_WORKSPACE, p.workspace},
                            {DNNL_ARG_DIFF_SRC, p.dx},
                            {DNNL_ARG_SCRATCHPAD,
                             Scratch(p.scratch_bwd, p.scratch_bytes)}});
    stream_.wait();
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(int num_threads) {
  const int threads = num_threads <= 0 ? 1 : num_threads;
  try {
    // The loops run on the calling thread only: oneDNN's OpenMP threads
    // keep spinning for a while after each primitive, and helper threads of
    // the loops' own pool would compete with them for the same cores.
    return std::unique_ptr<Backend>(
        new OnednnBackend(threads, NewCpuBackend(1)));
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("oneDNN: cannot create a CPU engine: ", e.what()));
  }
}

}  // namespace downpour
