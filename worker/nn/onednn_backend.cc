// File: worker/nn/onednn_backend.cc (see onednn_backend.h).
#include "worker/nn/onednn_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
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

// The interface's plain (row-major) layout of md's dimensions.
memory::desc PlainOf(const memory::desc& md) {
  const memory::dims dims = md.dims();
  switch (dims.size()) {
    case 1: return Plain(dims, Tag::a);
    case 2: return Plain(dims, Tag::ab);
    case 3: return Plain(dims, Tag::abc);
    case 4: return Plain(dims, Tag::abcd);
    default: return Plain(dims, Tag::abcde);
  }
}

// A buffer of layout `md` owned here, created on first use (for the rare
// arguments whose layout differs from the primitive's, and for outputs whose
// preferred layout is padded and so does not fit the caller's buffer).
memory& Spare(std::unique_ptr<memory>& slot, const memory::desc& md,
              const dnnl::engine& e) {
  if (slot == nullptr || slot->get_desc() != md) {
    slot = std::make_unique<memory>(md, e);
  }
  return *slot;
}

using ConvKey = std::array<int, 9>;
ConvKey KeyOf(const ConvDesc& d) {
  return {d.batch,    d.in_channels, d.in_h,   d.in_w, d.out_channels,
          d.kernel_h, d.kernel_w,    d.stride, d.pad};
}

// A convolution forward primitive, the layouts it chose (format_tag::any)
// for src, weights and dst, and the buffers of reorders into them.
struct ConvFwd {
  dnnl::convolution_forward prim;
  std::string impl;  // oneDNN's implementation name, e.g. "jit:avx512_core".
  memory::desc x, w, y, scratch;
  std::unique_ptr<memory> x_buf, w_buf, y_buf;
};

// The convolution primitives of one shape, the layouts they chose and the
// buffers of the weight-side reorders. The forward with the ReLU fused in
// (Conv2dReluForward) is made on first use (MakeFusedRelu): `fwd_relu` stays
// null when oneDNN has no such kernel, or not the kernel of `fwd`.
struct ConvPrims {
  ConvFwd fwd;
  dnnl::algorithm fwd_alg = dnnl::algorithm::convolution_direct;
  bool fwd_relu_tried = false;
  std::unique_ptr<ConvFwd> fwd_relu;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  std::string algorithms;  // For the log / tests: "fwd/bwd_data/bwd_weights".
  memory::desc x_plain, w_plain, y_plain, b_md;
  // Backward data: weights, diff_dst, diff_src. Backward weights: src,
  // diff_dst, diff_weights.
  memory::desc d_w, d_dy, d_dx, w_x, w_dy, w_dw;
  std::unique_ptr<memory> d_w_buf, d_dy_buf, d_dx_buf, w_x_buf, w_dy_buf,
      w_dw_buf;
  memory zero_bias, spare_dbias;
  memory::desc scratch_data, scratch_weights;
  size_t scratch_bytes = 0;  // The largest of all the primitives' scratchpads.
};

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

// Makes p's forward with the ReLU fused in, once: with the algorithm of the
// plain forward, and kept only when oneDNN runs it with the same kernel (the
// post-op must not cost a slower implementation, e.g. a reference one or
// the direct algorithm instead of Winograd). Otherwise p.fwd_relu stays
// null and Conv2dReluForward runs the convolution and the ReLU apart.
void MakeFusedRelu(const ConvDesc& d, ConvPrims& p, const dnnl::engine& e) {
  if (p.fwd_relu_tried) return;
  p.fwd_relu_tried = true;
  try {
    const dnnl::convolution_forward::primitive_desc pd =
        ConvFwdPd(d, p.fwd_alg, /*relu=*/true, e);
    if (pd.impl_info_str() != p.fwd.impl) return;
    p.fwd_relu = std::make_unique<ConvFwd>(MakeConvFwd(pd));
  } catch (const dnnl::error&) {
    return;  // No fused kernel for this shape on this machine.
  }
  p.scratch_bytes = std::max(p.scratch_bytes, p.fwd_relu->scratch.get_size());
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
  c->scratch_bytes = std::max({c->fwd.scratch.get_size(),
                               c->scratch_data.get_size(),
                               c->scratch_weights.get_size()});
  return c;
}

using PoolKey = std::array<int, 5>;

// Max pooling of one shape whose input is in layout `src` (the output and
// the gradients take the same layout): the training forward (which also
// writes the workspace of argmax positions) and the backward.
struct PoolPrims {
  dnnl::pooling_forward train;
  dnnl::pooling_backward bwd;
  memory::desc src, dst;
  std::unique_ptr<memory> y_buf, dy_buf, dx_buf, spare_y;
  memory workspace;
  // The buffers of the last training forward, whose argmax positions the
  // workspace holds (the interface's contract: Backward gets Forward's x and
  // y). Cleared when the backend writes into either.
  const float* ws_x = nullptr;
  const float* ws_y = nullptr;
  memory::desc scratch_train, scratch_bwd;
  size_t scratch_bytes = 0;
};

std::unique_ptr<PoolPrims> MakePool(const PoolDesc& d,
                                    const memory::desc& src_md,
                                    const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  const memory::desc y_any =
      Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::any);
  const memory::dims k = {d.window, d.window}, zero = {0, 0};
  // Trailing rows/cols that do not fill a window are dropped: oneDNN's
  // output size (in - window + pad) / window + 1 rounds down, as PyTorch's.
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  pooling_forward::primitive_desc tpd(
      {prop_kind::forward_training, algorithm::pooling_max, src_md, y_any, k,
       k, zero, zero},
      attr, e);
  pooling_backward::primitive_desc bpd(
      {algorithm::pooling_max, src_md, tpd.dst_desc(), k, k, zero, zero},
      attr, e, tpd);
  auto p = std::make_unique<PoolPrims>();
  p->train = pooling_forward(tpd);
  p->bwd = pooling_backward(bpd);
  p->src = src_md;
  p->dst = tpd.dst_desc();
  p->workspace = memory(tpd.workspace_desc(), e);
  p->scratch_train = tpd.scratchpad_desc();
  p->scratch_bwd = bpd.scratchpad_desc();
  p->scratch_bytes =
      std::max(p->scratch_train.get_size(), p->scratch_bwd.get_size());
  return p;
}

// ReLU forward and backward (from the output: dx = dy where y > 0) over n
// floats, as oneDNN eltwise primitives (vectorized for the machine).
struct ReluPrims {
  dnnl::eltwise_forward fwd;
  dnnl::eltwise_backward bwd;
  memory::desc md;
};

std::unique_ptr<ReluPrims> MakeRelu(int64_t n, const dnnl::engine& e) {
  using namespace dnnl;  // NOLINT
  const memory::desc md = Plain({static_cast<memory::dim>(n)}, Tag::x);
  eltwise_forward::primitive_desc fpd(
      {prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd,
       md, 0.f, 0.f},
      e);
  eltwise_backward::primitive_desc bpd(
      {algorithm::eltwise_relu_use_dst_for_bwd, md, md, 0.f, 0.f}, e, fpd);
  auto r = std::make_unique<ReluPrims>();
  r->fwd = eltwise_forward(fpd);
  r->bwd = eltwise_backward(bpd);
  r->md = md;
  return r;
}

// 64-byte aligned, zero-filled allocation of n floats (n may be 0).
float* AlignedZeroAlloc(int64_t n) {
  constexpr size_t kAlignment = 64;
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

class OnednnBackend : public Backend {
 public:
  OnednnBackend(const OnednnOptions& options, std::unique_ptr<Backend> loops)
      : options_(options),
        loops_(std::move(loops)),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {}

  std::string Name() const override { return "cpu (onednn)"; }

  // ---- Memory -------------------------------------------------------------
  absl::StatusOr<float*> Allocate(int64_t n) override {
    if (absl::Status s = ValidateAllocation(n); !s.ok()) return s;
    float* p = AlignedZeroAlloc(n);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: out of memory for ", n, " floats"));
    }
    allocations_[p] = n;
    return p;
  }
  void Free(float* p) override {
    auto it = allocations_.find(p);
    if (it != allocations_.end()) {
      Forget(p, Bytes(it->second));
      allocations_.erase(it);
    }
    std::free(p);
  }
  absl::Status CopyToDevice(const float* host_src, float* dst,
                            int64_t n) override;
  absl::Status CopyToHost(const float* src, float* host_dst,
                          int64_t n) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
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
  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError("Axpy: negative size");
    DP_RETURN_IF_ERROR(ReadPlain(x, n));
    DP_RETURN_IF_ERROR(ReadPlain(y, n));
    return loops_->Axpy(n, alpha, x, y);
  }
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
  // the shape (MakeFusedRelu), else Conv2dForward and ReluForward in place.
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

 private:
  // A region of backend memory holding a tensor in a layout other than the
  // interface's plain one.
  struct Region {
    size_t bytes;
    memory::desc md;
  };

  static size_t Bytes(int64_t n) { return static_cast<size_t>(n) * 4; }
  static uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

  // Sets this thread's OpenMP thread count (a per-thread setting). oneDNN
  // reads it both when a primitive is created (its work split) and when it
  // runs, so it is set before either.
  void EnterOp() const { omp_set_num_threads(options_.threads); }
  absl::StatusOr<ConvPrims*> Conv(const ConvDesc& d, const char* op);
  // Runs the forward `f` of p (p.fwd or p.fwd_relu) with bias b (may be
  // null) into y, which then holds f's output layout.
  absl::Status RunConvForward(ConvPrims& p, ConvFwd& f, const ConvDesc& d,
                              const float* x, const float* w, const float* b,
                              float* y, const char* op);
  absl::StatusOr<PoolPrims*> Pool(const PoolDesc& d, const memory::desc& src,
                                  const char* op);
  ReluPrims* Relu(int64_t n);
  // The scratchpad as `desc` (grown to at least `bytes` first).
  memory Scratch(const memory::desc& desc, size_t bytes);
  // Runs the (cached) reorder from `src` in layout `smd` to `dst` in `dmd`.
  void Reorder(const memory::desc& smd, const void* src,
               const memory::desc& dmd, void* dst);

  // ---- Layout bookkeeping -------------------------------------------------
  // The layout of the tensor of plain layout `plain` at p: a region's layout
  // when one starts at p with the same dimensions and size, else `plain`
  // (after converting any region that overlaps the tensor's bytes).
  memory::desc LayoutOf(const float* p, const memory::desc& plain);
  // Converts every region overlapping [p, p + n floats) to plain, in place.
  void ReadPlainOrThrow(const float* p, int64_t n);
  // Before [p, p + n floats) is written: regions inside it are dropped,
  // regions reaching beyond it converted to plain first; pooling workspaces
  // recorded on it are invalidated.
  void OverwriteOrThrow(const float* p, int64_t n);
  // Records that [p, p + md's size) now holds a tensor in layout md (nothing
  // to record when md is plain). Call after OverwriteOrThrow.
  void SetLayout(const float* p, const memory::desc& md, const memory::desc& plain);
  // Drops the regions and workspaces inside [p, p + bytes) (memory freed).
  void Forget(const void* p, size_t bytes);
  // The input tensor at p (plain layout `plain`) in layout `want`: p itself
  // when it already is, else a copy reordered into `spare`.
  void* Input(const float* p, const memory::desc& plain,
              const memory::desc& want, std::unique_ptr<memory>& spare);
  // Where an op writes its output of layout `want` for the plain tensor at p:
  // p itself when `want` fits its bytes, else `spare`; FinishOutput then
  // reorders the spare into p and records p's layout.
  void* Output(float* p, const memory::desc& plain, const memory::desc& want,
               std::unique_ptr<memory>& spare);
  void FinishOutput(float* p, const memory::desc& plain,
                    const memory::desc& want, std::unique_ptr<memory>& spare);

  absl::Status ReadPlain(const float* p, int64_t n) {
    if (regions_.empty()) return absl::OkStatus();
    return Guard("layout conversion", [&] {
      ReadPlainOrThrow(p, n);
      return absl::OkStatus();
    });
  }
  absl::Status Overwrite(const float* p, int64_t n) {
    if (regions_.empty() && !AnyWorkspace()) return absl::OkStatus();
    return Guard("layout conversion", [&] {
      OverwriteOrThrow(p, n);
      return absl::OkStatus();
    });
  }
  bool AnyWorkspace() const { return workspaces_ > 0; }

  const OnednnOptions options_;
  std::unique_ptr<Backend> loops_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<ConvKey, std::unique_ptr<ConvPrims>> convs_;
  std::map<PoolKey, std::vector<std::unique_ptr<PoolPrims>>> pools_;
  int workspaces_ = 0;  // Pool prims whose ws_x is set.
  std::map<int64_t, std::unique_ptr<ReluPrims>> relus_;
  struct CachedReorder {
    memory::desc src, dst;
    dnnl::reorder prim;
  };
  std::vector<CachedReorder> reorders_;
  std::map<uintptr_t, Region> regions_;     // By start address.
  std::map<const float*, int64_t> allocations_;  // Allocate()d, in floats.
  std::unique_ptr<memory> scratch_;  // u8 buffer, only grown.
  size_t scratch_size_ = 0;
  std::vector<float> convert_;  // In-place conversions go through it.
};


memory OnednnBackend::Scratch(const memory::desc& desc, size_t bytes) {
  if (bytes > scratch_size_ || scratch_ == nullptr) {
    const memory::dim n = static_cast<memory::dim>(std::max<size_t>(bytes, 64));
    scratch_ = std::make_unique<memory>(memory::desc({n}, Dt::u8, Tag::x),
                                        engine_);
    scratch_size_ = static_cast<size_t>(n);
  }
  return memory(desc, engine_, scratch_->get_data_handle());
}

void OnednnBackend::Reorder(const memory::desc& smd, const void* src,
                            const memory::desc& dmd, void* dst) {
  CachedReorder* r = nullptr;
  for (CachedReorder& c : reorders_) {
    if (c.src == smd && c.dst == dmd) {
      r = &c;
      break;
    }
  }
  memory s(smd, engine_, const_cast<void*>(src));
  memory d(dmd, engine_, dst);
  if (r == nullptr) {
    reorders_.push_back({smd, dmd, dnnl::reorder(s, d)});
    r = &reorders_.back();
  }
  r->prim.execute(stream_, s, d);
  stream_.wait();
}

// ---- Layout bookkeeping ---------------------------------------------------

memory::desc OnednnBackend::LayoutOf(const float* p,
                                     const memory::desc& plain) {
  if (regions_.empty()) return plain;
  auto it = regions_.find(Addr(p));
  if (it != regions_.end() && it->second.bytes == plain.get_size() &&
      it->second.md.dims() == plain.dims()) {
    return it->second.md;
  }
  ReadPlainOrThrow(p, static_cast<int64_t>(plain.get_size() / 4));
  return plain;
}

void OnednnBackend::ReadPlainOrThrow(const float* p, int64_t n) {
  const uintptr_t lo = Addr(p), hi = lo + Bytes(n);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const uintptr_t rlo = it->first, rhi = rlo + it->second.bytes;
    if (rlo >= hi || rhi <= lo) {
      ++it;
      continue;
    }
    // Reorder to plain through convert_, then back in place.
    const memory::desc& md = it->second.md;
    const memory::desc plain = PlainOf(md);
    convert_.resize(it->second.bytes / 4);
    void* where = reinterpret_cast<void*>(rlo);
    Reorder(md, where, plain, convert_.data());
    std::memcpy(where, convert_.data(), it->second.bytes);
    it = regions_.erase(it);
  }
}

void OnednnBackend::OverwriteOrThrow(const float* p, int64_t n) {
  const uintptr_t lo = Addr(p), hi = lo + Bytes(n);
  if (workspaces_ > 0) {
    for (auto& [key, list] : pools_) {
      for (auto& pp : list) {
        if (pp->ws_x == nullptr) continue;
        const uintptr_t x = Addr(pp->ws_x), y = Addr(pp->ws_y);
        const uintptr_t xe = x + pp->src.get_size(), ye = y + pp->dst.get_size();
        if ((x < hi && xe > lo) || (y < hi && ye > lo)) {
          pp->ws_x = pp->ws_y = nullptr;
          --workspaces_;
        }
      }
    }
  }
  for (auto it = regions_.begin(); it != regions_.end();) {
    const uintptr_t rlo = it->first, rhi = rlo + it->second.bytes;
    if (rlo >= hi || rhi <= lo) {
      ++it;
    } else if (rlo >= lo && rhi <= hi) {
      it = regions_.erase(it);  // Wholly overwritten.
    } else {
      // Partly overwritten: the rest must stay readable as plain.
      ReadPlainOrThrow(reinterpret_cast<const float*>(rlo),
                       static_cast<int64_t>(it->second.bytes / 4));
      it = regions_.begin();
    }
  }
}

void OnednnBackend::SetLayout(const float* p, const memory::desc& md,
                              const memory::desc& plain) {
  if (md == plain) return;
  regions_[Addr(p)] = Region{md.get_size(), md};
}

void OnednnBackend::Forget(const void* p, size_t bytes) {
  const uintptr_t lo = Addr(p), hi = lo + bytes;
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->first >= lo && it->first < hi) {
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [key, list] : pools_) {
    for (auto& pp : list) {
      if (pp->ws_x == nullptr) continue;
      if ((Addr(pp->ws_x) >= lo && Addr(pp->ws_x) < hi) ||
          (Addr(pp->ws_y) >= lo && Addr(pp->ws_y) < hi)) {
        pp->ws_x = pp->ws_y = nullptr;
        --workspaces_;
      }
    }
  }
}

void* OnednnBackend::Input(const float* p, const memory::desc& plain,
                           const memory::desc& want,
                           std::unique_ptr<memory>& spare) {
  const memory::desc have = LayoutOf(p, plain);
  if (have == want) return const_cast<float*>(p);
  memory& s = Spare(spare, want, engine_);
  Reorder(have, p, want, s.get_data_handle());
  return s.get_data_handle();
}

void* OnednnBackend::Output(float* p, const memory::desc& plain,
                            const memory::desc& want,
                            std::unique_ptr<memory>& spare) {
  OverwriteOrThrow(p, static_cast<int64_t>(plain.get_size() / 4));
  if (want.get_size() == plain.get_size()) return p;
  return Spare(spare, want, engine_).get_data_handle();
}

void OnednnBackend::FinishOutput(float* p, const memory::desc& plain,
                                 const memory::desc& want,
                                 std::unique_ptr<memory>& spare) {
  if (want.get_size() == plain.get_size()) {
    SetLayout(p, want, plain);
  } else {
    Reorder(want, spare->get_data_handle(), plain, p);
  }
}

// ---- Memory ---------------------------------------------------------------

absl::Status OnednnBackend::CopyToDevice(const float* host_src, float* dst,
                                         int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("CopyToDevice: negative size");
  DP_RETURN_IF_ERROR(Overwrite(dst, n));
  if (n > 0) std::memcpy(dst, host_src, Bytes(n));
  return absl::OkStatus();
}

absl::Status OnednnBackend::CopyToHost(const float* src, float* host_dst,
                                       int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("CopyToHost: negative size");
  return Guard("CopyToHost", [&] {
    auto it = regions_.find(Addr(src));
    if (it != regions_.end() && it->second.bytes == Bytes(n)) {
      // The model's edge: the backend's layout back to the interface's.
      const memory::desc& md = it->second.md;
      Reorder(md, src, PlainOf(md), host_dst);
      return absl::OkStatus();
    }
    ReadPlainOrThrow(src, n);
    if (n > 0) std::memcpy(host_dst, src, Bytes(n));
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Copy(const float* src, float* dst, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("Copy: negative size");
  if (src == dst || n == 0) return absl::OkStatus();
  return Guard("Copy", [&] {
    auto it = regions_.find(Addr(src));
    if (it != regions_.end() && it->second.bytes == Bytes(n)) {
      // Flatten's copy: the reorder to plain is the copy.
      const memory::desc md = it->second.md;
      OverwriteOrThrow(dst, n);
      Reorder(md, src, PlainOf(md), dst);
      return absl::OkStatus();
    }
    ReadPlainOrThrow(src, n);
    OverwriteOrThrow(dst, n);
    std::memmove(dst, src, Bytes(n));
    return absl::OkStatus();
  });
}

// ---- Primitive caches -----------------------------------------------------

absl::StatusOr<ConvPrims*> OnednnBackend::Conv(const ConvDesc& d,
                                               const char* op) {
  if (absl::Status s = ValidateConv(d, op); !s.ok()) return s;
  std::unique_ptr<ConvPrims>& c = convs_[KeyOf(d)];
  if (c == nullptr) {
    absl::Status s = Guard(op, [&] {
      c = MakeConv(d, options_.winograd, engine_);
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
                                               const memory::desc& src,
                                               const char* op) {
  const PoolKey key = {d.batch, d.channels, d.in_h, d.in_w, d.window};
  std::vector<std::unique_ptr<PoolPrims>>& list = pools_[key];
  for (auto& p : list) {
    if (p->src == src) return p.get();
  }
  std::unique_ptr<PoolPrims> p;
  DP_RETURN_IF_ERROR(Guard(op, [&] {
    p = MakePool(d, src, engine_);
    return absl::OkStatus();
  }));
  list.push_back(std::move(p));
  return list.back().get();
}

ReluPrims* OnednnBackend::Relu(int64_t n) {
  std::unique_ptr<ReluPrims>& r = relus_[n];
  if (r == nullptr) r = MakeRelu(n, engine_);
  return r.get();
}

// ---- Operations -----------------------------------------------------------

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

absl::Status OnednnBackend::RunConvForward(ConvPrims& p, ConvFwd& f,
                                           const ConvDesc& d, const float* x,
                                           const float* w, const float* b,
                                           float* y, const char* op) {
  return Guard(op, [&] {
    if (b != nullptr) ReadPlainOrThrow(b, d.out_channels);
    memory bias = b != nullptr
                      ? memory(p.b_md, engine_, const_cast<float*>(b))
                      : p.zero_bias;
    void* src = Input(x, p.x_plain, f.x, f.x_buf);
    void* wei = Input(w, p.w_plain, f.w, f.w_buf);
    void* dst = Output(y, p.y_plain, f.y, f.y_buf);
    f.prim.execute(stream_, {{DNNL_ARG_SRC, memory(f.x, engine_, src)},
                             {DNNL_ARG_WEIGHTS, memory(f.w, engine_, wei)},
                             {DNNL_ARG_BIAS, bias},
                             {DNNL_ARG_DST, memory(f.y, engine_, dst)},
                             {DNNL_ARG_SCRATCHPAD,
                              Scratch(f.scratch, p.scratch_bytes)}});
    stream_.wait();
    FinishOutput(y, p.y_plain, f.y, f.y_buf);
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::Conv2dForward(const ConvDesc& d, const float* x,
                                          const float* w, const float* b,
                                          float* y) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dForward");
  if (!c.ok()) return c.status();
  return RunConvForward(**c, (*c)->fwd, d, x, w, b, y, "Conv2dForward");
}

absl::Status OnednnBackend::Conv2dReluForward(const ConvDesc& d,
                                              const float* x, const float* w,
                                              const float* b, float* y) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dReluForward");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  MakeFusedRelu(d, p, engine_);
  if (p.fwd_relu != nullptr) {
    return RunConvForward(p, *p.fwd_relu, d, x, w, b, y, "Conv2dReluForward");
  }
  DP_RETURN_IF_ERROR(
      RunConvForward(p, p.fwd, d, x, w, b, y, "Conv2dReluForward"));
  return ReluForward(static_cast<int64_t>(p.y_plain.get_size() / 4), y, y);
}

absl::Status OnednnBackend::Conv2dBackwardData(const ConvDesc& d,
                                               const float* w, const float* dy,
                                               float* dx) {
  EnterOp();  // Before Conv(): oneDNN fixes its thread count at creation.
  absl::StatusOr<ConvPrims*> c = Conv(d, "Conv2dBackwardData");
  if (!c.ok()) return c.status();
  ConvPrims& p = **c;
  return Guard("Conv2dBackwardData", [&] {
    void* wei = Input(w, p.w_plain, p.d_w, p.d_w_buf);
    void* ddst = Input(dy, p.y_plain, p.d_dy, p.d_dy_buf);
    void* dsrc = Output(dx, p.x_plain, p.d_dx, p.d_dx_buf);
    p.bwd_data.execute(stream_,
                       {{DNNL_ARG_WEIGHTS, memory(p.d_w, engine_, wei)},
                        {DNNL_ARG_DIFF_DST, memory(p.d_dy, engine_, ddst)},
                        {DNNL_ARG_DIFF_SRC, memory(p.d_dx, engine_, dsrc)},
                        {DNNL_ARG_SCRATCHPAD,
                         Scratch(p.scratch_data, p.scratch_bytes)}});
    stream_.wait();
    FinishOutput(dx, p.x_plain, p.d_dx, p.d_dx_buf);
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
    void* src = Input(x, p.x_plain, p.w_x, p.w_x_buf);
    void* ddst = Input(dy, p.y_plain, p.w_dy, p.w_dy_buf);
    // Weight gradients go to the flat gradient buffer in the plain OIHW
    // layout the parameter servers shard.
    OverwriteOrThrow(dw, p.w_plain.get_size() / 4);
    void* dwei = p.w_dw == p.w_plain
                     ? static_cast<void*>(dw)
                     : Spare(p.w_dw_buf, p.w_dw, engine_).get_data_handle();
    memory dbias = p.spare_dbias;
    if (db != nullptr) {
      OverwriteOrThrow(db, d.out_channels);
      dbias = memory(p.b_md, engine_, db);
    }
    p.bwd_weights.execute(
        stream_, {{DNNL_ARG_SRC, memory(p.w_x, engine_, src)},
                  {DNNL_ARG_DIFF_DST, memory(p.w_dy, engine_, ddst)},
                  {DNNL_ARG_DIFF_WEIGHTS, memory(p.w_dw, engine_, dwei)},
                  {DNNL_ARG_DIFF_BIAS, dbias},
                  {DNNL_ARG_SCRATCHPAD,
                   Scratch(p.scratch_weights, p.scratch_bytes)}});
    stream_.wait();
    if (dwei != dw) Reorder(p.w_dw, dwei, p.w_plain, dw);
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
    auto it = regions_.find(Addr(x));
    if (it != regions_.end() && it->second.bytes == Bytes(n)) {
      md = it->second.md;
      blocked = true;
    } else {
      ReadPlainOrThrow(x, n);
    }
    OverwriteOrThrow(y, n);
    ReluPrims* r = Relu(n);
    r->fwd.execute(stream_, {{DNNL_ARG_SRC, memory(r->md, engine_,
                                                   const_cast<float*>(x))},
                             {DNNL_ARG_DST, memory(r->md, engine_, y)}});
    stream_.wait();
    if (blocked) regions_[Addr(y)] = Region{Bytes(n), md};
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::ReluBackward(int64_t n, const float* y,
                                         const float* dy, float* dx) {
  if (n < 0) return absl::InvalidArgumentError("ReluBackward: negative size");
  if (n == 0) return absl::OkStatus();
  EnterOp();
  return Guard("ReluBackward", [&] {
    auto iy = regions_.find(Addr(y));
    auto idy = regions_.find(Addr(dy));
    const bool y_blocked = iy != regions_.end() && iy->second.bytes == Bytes(n);
    const bool dy_blocked =
        idy != regions_.end() && idy->second.bytes == Bytes(n);
    memory::desc md;
    bool blocked = false;
    if (y_blocked && dy_blocked && iy->second.md == idy->second.md) {
      md = iy->second.md;
      blocked = true;
    } else {
      ReadPlainOrThrow(y, n);
      ReadPlainOrThrow(dy, n);
    }
    OverwriteOrThrow(dx, n);
    ReluPrims* r = Relu(n);
    r->bwd.execute(stream_,
                   {{DNNL_ARG_DST, memory(r->md, engine_, const_cast<float*>(y))},
                    {DNNL_ARG_DIFF_DST,
                     memory(r->md, engine_, const_cast<float*>(dy))},
                    {DNNL_ARG_DIFF_SRC, memory(r->md, engine_, dx)}});
    stream_.wait();
    if (blocked) regions_[Addr(dx)] = Region{Bytes(n), md};
    return absl::OkStatus();
  });
}

absl::Status OnednnBackend::MaxPoolForward(const PoolDesc& d, const float* x,
                                           float* y) {
  if (absl::Status s = ValidatePool(d, "MaxPoolForward"); !s.ok()) return s;
  EnterOp();  // Before Pool(): see Conv2dForward.
  const memory::desc x_plain =
      Plain({d.batch, d.channels, d.in_h, d.in_w}, Tag::nchw);
  const memory::desc y_plain =
      Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::nchw);
  memory::desc src;
  DP_RETURN_IF_ERROR(Guard("MaxPoolForward", [&] {
    src = LayoutOf(x, x_plain);
    return absl::OkStatus();
  }));
  absl::StatusOr<PoolPrims*> pp = Pool(d, src, "MaxPoolForward");
  if (!pp.ok()) return pp.status();
  PoolPrims& p = **pp;
  return Guard("MaxPoolForward", [&] {
    void* dst = Output(y, y_plain, p.dst, p.y_buf);
    // The training forward also records the argmax workspace; it costs the
    // same memory traffic as inference plus one byte per output.
    p.train.execute(stream_, {{DNNL_ARG_SRC,
                               memory(p.src, engine_, const_cast<float*>(x))},
                              {DNNL_ARG_DST, memory(p.dst, engine_, dst)},
                              {DNNL_ARG_WORKSPACE, p.workspace},
                              {DNNL_ARG_SCRATCHPAD,
                               Scratch(p.scratch_train, p.scratch_bytes)}});
    stream_.wait();
    FinishOutput(y, y_plain, p.dst, p.y_buf);
    if (p.ws_x == nullptr) ++workspaces_;
    p.ws_x = x;
    p.ws_y = y;
    return absl::OkStatus();
  });
}

// oneDNN's max-pool backward routes dy through the argmax workspace of a
// training forward. When the last forward of this shape and layout was on
// these x and y, unchanged since, its workspace is used; otherwise the
// forward runs again here (a cheap, memory-bound pass) into a spare output.
absl::Status OnednnBackend::MaxPoolBackward(const PoolDesc& d, const float* x,
                                            const float* y, const float* dy,
                                            float* dx) {
  if (absl::Status s = ValidatePool(d, "MaxPoolBackward"); !s.ok()) return s;
  EnterOp();  // Before Pool(): see Conv2dForward.
  const memory::desc x_plain =
      Plain({d.batch, d.channels, d.in_h, d.in_w}, Tag::nchw);
  const memory::desc y_plain =
      Plain({d.batch, d.channels, d.OutH(), d.OutW()}, Tag::nchw);
  memory::desc src;
  DP_RETURN_IF_ERROR(Guard("MaxPoolBackward", [&] {
    src = LayoutOf(x, x_plain);
    return absl::OkStatus();
  }));
  absl::StatusOr<PoolPrims*> pp = Pool(d, src, "MaxPoolBackward");
  if (!pp.ok()) return pp.status();
  PoolPrims& p = **pp;
  return Guard("MaxPoolBackward", [&] {
    if (p.ws_x != x || p.ws_y != y) {
      memory& spare_y = Spare(p.spare_y, p.dst, engine_);
      p.train.execute(stream_,
                      {{DNNL_ARG_SRC,
                        memory(p.src, engine_, const_cast<float*>(x))},
                       {DNNL_ARG_DST, spare_y},
                       {DNNL_ARG_WORKSPACE, p.workspace},
                       {DNNL_ARG_SCRATCHPAD,
                        Scratch(p.scratch_train, p.scratch_bytes)}});
      // The workspace now belongs to the spare's forward.
      if (p.ws_x != nullptr) --workspaces_;
      p.ws_x = p.ws_y = nullptr;
    }
    void* ddst = Input(dy, y_plain, p.dst, p.dy_buf);
    void* dsrc = Output(dx, x_plain, p.src, p.dx_buf);
    p.bwd.execute(stream_, {{DNNL_ARG_DIFF_DST, memory(p.dst, engine_, ddst)},
                            {DNNL_ARG_WORKSPACE, p.workspace},
                            {DNNL_ARG_DIFF_SRC, memory(p.src, engine_, dsrc)},
                            {DNNL_ARG_SCRATCHPAD,
                             Scratch(p.scratch_bwd, p.scratch_bytes)}});
    stream_.wait();
    FinishOutput(dx, x_plain, p.src, p.dx_buf);
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(
    const OnednnOptions& options) {
  OnednnOptions o = options;
  if (o.threads <= 0) o.threads = 1;
  try {
    // The loops run on the calling thread only: oneDNN's OpenMP threads
    // keep spinning for a while after each primitive, and helper threads of
    // the loops' own pool would compete with them for the same cores.
    return std::unique_ptr<Backend>(new OnednnBackend(o, NewCpuBackend(1)));
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
