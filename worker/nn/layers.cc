// File: worker/nn/layers.cc
//
// The one-input layers declared in model.h (convolution, ReLU, pooling,
// flatten, dense) and the shared bookkeeping of layer_base.h. Layers are
// thin: they translate their configuration into backend calls and hold views
// (set by Bind) of the model's parameter and gradient buffers. Scratch memory
// for the convolution lowering lives inside the backend; the only buffer one
// of these layers owns is a fused Conv2d + ReLU's masked gradient.
// FuseConvRelu, the model-building step that fuses, is here too: it
// recognizes the layer classes. The layers of graphs and normalization are in
// layers_graph.cc.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/nn/backend.h"
#include "worker/nn/layer_base.h"
#include "worker/nn/model.h"

namespace downpour {

absl::Status CheckDims(const std::string& name, const Dims& in) {
  if (in.c < 1 || in.h < 1 || in.w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", name, ": bad input dims ", in.c, "x", in.h, "x", in.w));
  }
  return absl::OkStatus();
}

absl::Status EnsureBuffer(Backend* backend, int64_t n, DeviceBuffer* buffer) {
  if (buffer->data() != nullptr) return absl::OkStatus();
  DP_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Create(backend, n));
  return absl::OkStatus();
}

absl::StatusOr<const float*> FusedReluGradient(Backend* backend,
                                               int64_t capacity, int64_t n,
                                               const float* y, const float* dy,
                                               DeviceBuffer* mask) {
  DP_RETURN_IF_ERROR(EnsureBuffer(backend, capacity, mask));
  // The last step's mask (of a possibly larger batch) is dead.
  DP_RETURN_IF_ERROR(backend->Discard(mask->data(), mask->size()));
  DP_RETURN_IF_ERROR(backend->ReluBackward(n, y, dy, mask->data()));
  return mask->data();
}

absl::Status Layer::BackwardInput(int, const std::vector<const float*>&,
                                  const float*, const float*,
                                  const std::vector<float*>&) {
  return absl::UnimplementedError(
      absl::StrCat("layer ", name(), " does not split its backward pass"));
}

absl::Status Layer::BackwardParams() {
  return absl::UnimplementedError(
      absl::StrCat("layer ", name(), " does not split its backward pass"));
}

absl::Status Layer::BindState(const std::vector<float*>& state) {
  if (!state.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", name(), ": has no state, got ", state.size(),
                     " views"));
  }
  return absl::OkStatus();
}

absl::Status Layer::Forward(int batch, const float* x, float* y) {
  ForwardPass pass;
  pass.training = true;
  return Forward(pass, batch, std::vector<const float*>{x}, y);
}

absl::Status Layer::Backward(int batch, const float* x, const float* y,
                             const float* dy, float* dx) {
  return Backward(batch, std::vector<const float*>{x}, y, dy,
                  std::vector<float*>{dx});
}

absl::Status LayerBase::BindCommon(Backend* backend,
                                   const std::vector<float*>& params,
                                   const std::vector<float*>& grads,
                                   int max_batch) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", name_, ": null backend"));
  }
  if (!configured_) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", name_, ": Bind before Configure"));
  }
  const size_t want = Params().size();
  if (params.size() != want || grads.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", name_, ": expected ", want,
        " parameter/gradient views, got ", params.size(), "/", grads.size()));
  }
  for (size_t i = 0; i < want; ++i) {
    if (params[i] == nullptr || grads[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", name_, ": null parameter view ", i));
    }
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", name_, ": max_batch must be >= 1"));
  }
  backend_ = backend;
  max_batch_ = max_batch;
  return absl::OkStatus();
}

absl::Status LayerBase::CheckRun(int batch) const {
  if (backend_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", name_, ": used before Bind"));
  }
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", name_, ": batch ", batch, " not in [1, ", max_batch_, "]"));
  }
  return absl::OkStatus();
}

absl::Status LayerBase::CheckArity(size_t n, const std::vector<const float*>& x,
                                   const std::vector<float*>* dx) const {
  if (x.size() != n || (dx != nullptr && dx->size() != n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", name_, ": expected ", n, " input(s), got ",
                     x.size()));
  }
  for (const float* p : x) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", name_, ": null input"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dims> UnaryLayer::Configure(const std::vector<Dims>& in) {
  if (in.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", name_, ": takes one input, got ", in.size()));
  }
  DP_RETURN_IF_ERROR(CheckDims(name_, in[0]));
  return ConfigureOne(in[0]);
}

absl::Status UnaryLayer::Forward(const ForwardPass& pass, int batch,
                                 const std::vector<const float*>& x,
                                 float* y) {
  DP_RETURN_IF_ERROR(CheckRun(batch));
  DP_RETURN_IF_ERROR(CheckArity(1, x, nullptr));
  return ForwardOne(pass, batch, x[0], y);
}

absl::Status UnaryLayer::Backward(int batch,
                                  const std::vector<const float*>& x,
                                  const float* y, const float* dy,
                                  const std::vector<float*>& dx) {
  DP_RETURN_IF_ERROR(CheckRun(batch));
  DP_RETURN_IF_ERROR(CheckArity(1, x, &dx));
  return BackwardOne(batch, x[0], y, dy, dx[0]);
}

namespace {

// A one-input layer whose Params() are {weight} or {weight, bias}: binds
// the views.
class WeightBiasLayer : public UnaryLayer {
 public:
  WeightBiasLayer(std::string name, bool bias)
      : UnaryLayer(std::move(name)), has_bias_(bias) {}
  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    DP_RETURN_IF_ERROR(BindCommon(backend, params, grads, max_batch));
    w_ = params[0];
    dw_ = grads[0];
    b_ = has_bias_ ? params[1] : nullptr;
    db_ = has_bias_ ? grads[1] : nullptr;
    return absl::OkStatus();
  }

 protected:
  const bool has_bias_;
  const float* w_ = nullptr;
  const float* b_ = nullptr;  // Null without a bias.
  float* dw_ = nullptr;
  float* db_ = nullptr;       // Null without a bias.
};

// A convolution, optionally followed by a ReLU in the same layer (`relu`,
// the fusion of NewConv2dRelu): the forward pass is then the backend's
// Conv2dReluForward, and the backward pass masks dy by this layer's output
// (y > 0) into mask_ before the convolution's backward, which is exactly
// Relu's backward followed by Conv2d's. The parameters are the same either
// way.
class Conv2dLayer : public WeightBiasLayer {
 public:
  Conv2dLayer(std::string name, int out_channels, int kernel, int pad,
              int stride, bool bias, bool relu)
      : WeightBiasLayer(std::move(name), bias),
        out_channels_(out_channels),
        kernel_(kernel),
        pad_(pad),
        stride_(stride),
        relu_(relu) {}

  bool fused_relu() const { return relu_; }
  // This convolution with the ReLU fused in (not configured nor bound).
  std::unique_ptr<Layer> WithRelu() const {
    return std::make_unique<Conv2dLayer>(name_, out_channels_, kernel_, pad_,
                                         stride_, has_bias_, /*relu=*/true);
  }

  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    mask_ = DeviceBuffer();  // Of the previous binding's backend, if any.
    return WeightBiasLayer::Bind(backend, params, grads, max_batch);
  }

  std::vector<ParamSpec> Params() const override {
    const int64_t fan_in = int64_t{in_.c} * kernel_ * kernel_;
    std::vector<ParamSpec> p = {{"weight",
                                 {out_channels_, in_.c, kernel_, kernel_},
                                 Init::kHeUniform,
                                 fan_in}};
    if (has_bias_) p.push_back({"bias", {out_channels_}, Init::kZeros, fan_in});
    return p;
  }

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    if (out_channels_ < 1 || kernel_ < 1 || pad_ < 0 || stride_ < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conv ", name_, ": bad out_channels=", out_channels_, " kernel=",
          kernel_, " pad=", pad_, " stride=", stride_));
    }
    if (in.h + 2 * pad_ < kernel_ || in.w + 2 * pad_ < kernel_) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv ", name_, ": kernel ", kernel_,
                       " larger than padded input ", in.h + 2 * pad_, "x",
                       in.w + 2 * pad_));
    }
    in_ = in;
    const ConvDesc d = Desc(1);
    configured_ = true;
    return Dims{out_channels_, d.OutH(), d.OutW()};
  }

  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    if (relu_) return backend_->Conv2dReluForward(Desc(batch), x, w_, b_, y);
    return backend_->Conv2dForward(Desc(batch), x, w_, b_, y);
  }

  absl::Status BackwardOne(int batch, const float* x, const float* y,
                           const float* dy, float* dx) override {
    const ConvDesc d = Desc(batch);
    if (relu_) {
      DP_ASSIGN_OR_RETURN(dy, MaskedGradient(d, y, dy));
    }
    DP_RETURN_IF_ERROR(backend_->Conv2dBackwardFilter(d, x, dy, dw_, db_));
    if (dx != nullptr) {
      DP_RETURN_IF_ERROR(backend_->Conv2dBackwardData(d, w_, dy, dx));
    }
    return absl::OkStatus();
  }

  // Only the fused form splits: its masked gradient stays in mask_ until the
  // parameter gradients are computed; an unfused convolution's dy is the
  // model's buffer, which later layers' backward passes reuse.
  bool SplitsBackward() const override { return relu_; }

  absl::Status BackwardInput(int batch, const std::vector<const float*>& x,
                             const float* y, const float* dy,
                             const std::vector<float*>& dx) override {
    if (!relu_) return Layer::BackwardInput(batch, x, y, dy, dx);
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(CheckArity(1, x, &dx));
    const ConvDesc d = Desc(batch);
    DP_ASSIGN_OR_RETURN(const float* masked, MaskedGradient(d, y, dy));
    if (dx[0] != nullptr) {
      DP_RETURN_IF_ERROR(backend_->Conv2dBackwardData(d, w_, masked, dx[0]));
    }
    deferred_ = Deferred{d, x[0], masked};
    return absl::OkStatus();
  }

  absl::Status BackwardParams() override {
    if (!deferred_.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layer ", name_, ": BackwardParams without BackwardInput"));
    }
    const Deferred d = *deferred_;
    deferred_.reset();
    return backend_->Conv2dBackwardFilter(d.desc, d.x, d.dy, dw_, db_);
  }

 private:
  ConvDesc Desc(int batch) const {
    ConvDesc d;
    d.batch = batch;
    d.in_channels = in_.c;
    d.in_h = in_.h;
    d.in_w = in_.w;
    d.out_channels = out_channels_;
    d.kernel_h = d.kernel_w = kernel_;
    d.stride = stride_;
    d.pad = pad_;
    return d;
  }

  // What an unfused Relu layer would have written into the model's gradient
  // buffer: dy masked by y > 0, in mask_.
  absl::StatusOr<const float*> MaskedGradient(const ConvDesc& d,
                                              const float* y,
                                              const float* dy) {
    const int64_t per_example = int64_t{out_channels_} * d.OutH() * d.OutW();
    return FusedReluGradient(backend_, max_batch_ * per_example,
                             d.batch * per_example, y, dy, &mask_);
  }

  // Between BackwardInput and BackwardParams.
  struct Deferred {
    ConvDesc desc;
    const float* x;
    const float* dy;  // mask_.
  };

  const int out_channels_, kernel_, pad_, stride_;
  const bool relu_;
  DeviceBuffer mask_;  // With relu_: dy masked by y > 0, max_batch rows.
  std::optional<Deferred> deferred_;
};

class ReluLayer : public ParameterlessLayer {
 public:
  using ParameterlessLayer::ParameterlessLayer;

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    in_ = in;
    configured_ = true;
    return in;
  }
  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    return backend_->ReluForward(batch * in_.Size(), x, y);
  }
  absl::Status BackwardOne(int batch, const float* /*x*/, const float* y,
                           const float* dy, float* dx) override {
    if (dx == nullptr) return absl::OkStatus();
    return backend_->ReluBackward(batch * in_.Size(), y, dy, dx);
  }
};

// Max or average pooling (PoolDesc).
class PoolLayer : public ParameterlessLayer {
 public:
  PoolLayer(std::string name, bool max, int window, int stride, int pad)
      : ParameterlessLayer(std::move(name)),
        max_(max),
        window_(window),
        stride_(stride),
        pad_(pad) {}

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    const char* kind = max_ ? "max_pool " : "avg_pool ";
    if (window_ < 1 || stride_ < 0 || pad_ < 0 || 2 * pad_ > window_) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, name_, ": bad window=", window_, " stride=",
                       stride_, " pad=", pad_));
    }
    if (in.h + 2 * pad_ < window_ || in.w + 2 * pad_ < window_) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, name_, ": window ", window_,
                       " does not fit input ", in.h, "x", in.w));
    }
    in_ = in;
    configured_ = true;
    const PoolDesc d = Desc(1);
    return Dims{in.c, d.OutH(), d.OutW()};
  }
  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    if (max_) return backend_->MaxPoolForward(Desc(batch), x, y);
    return backend_->AvgPoolForward(Desc(batch), x, y);
  }
  absl::Status BackwardOne(int batch, const float* x, const float* y,
                           const float* dy, float* dx) override {
    if (dx == nullptr) return absl::OkStatus();
    if (max_) return backend_->MaxPoolBackward(Desc(batch), x, y, dy, dx);
    return backend_->AvgPoolBackward(Desc(batch), dy, dx);
  }

 private:
  PoolDesc Desc(int batch) const {
    PoolDesc d;
    d.batch = batch;
    d.channels = in_.c;
    d.in_h = in_.h;
    d.in_w = in_.w;
    d.window = window_;
    d.stride = stride_;
    d.pad = pad_;
    return d;
  }
  const bool max_;
  const int window_, stride_, pad_;
};

// NCHW memory already is the flattened layout, so Flatten only copies (the
// Layer interface gives it separate x and y buffers).
class FlattenLayer : public ParameterlessLayer {
 public:
  using ParameterlessLayer::ParameterlessLayer;

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    in_ = in;
    configured_ = true;
    return Dims{static_cast<int>(in.Size()), 1, 1};
  }
  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    return backend_->Copy(x, y, batch * in_.Size());
  }
  absl::Status BackwardOne(int batch, const float* /*x*/, const float* /*y*/,
                           const float* dy, float* dx) override {
    if (dx == nullptr) return absl::OkStatus();
    return backend_->Copy(dy, dx, batch * in_.Size());
  }
};

class DenseLayer : public WeightBiasLayer {
 public:
  DenseLayer(std::string name, int out_features, bool bias)
      : WeightBiasLayer(std::move(name), bias), out_(out_features) {}

  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> p = {
        {"weight", {out_, in_features_}, Init::kHeUniform, in_features_}};
    if (has_bias_) p.push_back({"bias", {out_}, Init::kZeros, in_features_});
    return p;
  }

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    if (out_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense ", name_, ": bad out_features=", out_));
    }
    if (in.Size() > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense ", name_, ": input too large"));
    }
    in_ = in;
    in_features_ = static_cast<int>(in.Size());
    configured_ = true;
    return Dims{out_, 1, 1};
  }

  // y[batch, out] = x[batch, in] * W^T + b.
  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    DP_RETURN_IF_ERROR(backend_->Gemm(false, true, batch, out_, in_features_,
                                      1.f, x, w_, 0.f, y));
    if (b_ == nullptr) return absl::OkStatus();
    return backend_->AddRowBias(batch, out_, b_, y);
  }

  // dW = dy^T x, db = column sums of dy, dx = dy W.
  absl::Status BackwardOne(int batch, const float* x, const float* /*y*/,
                           const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(backend_->Gemm(true, false, out_, in_features_, batch,
                                      1.f, dy, x, 0.f, dw_));
    if (db_ != nullptr) {
      DP_RETURN_IF_ERROR(backend_->ColumnSum(batch, out_, dy, db_));
    }
    if (dx != nullptr) {
      DP_RETURN_IF_ERROR(backend_->Gemm(false, false, batch, in_features_, out_,
                                        1.f, dy, w_, 0.f, dx));
    }
    return absl::OkStatus();
  }

 private:
  const int out_;
  int in_features_ = 0;
};

}  // namespace

std::unique_ptr<Layer> NewConv2d(std::string name, int out_channels, int kernel,
                                 int pad, int stride, bool bias) {
  return std::make_unique<Conv2dLayer>(std::move(name), out_channels, kernel,
                                       pad, stride, bias, /*relu=*/false);
}
std::unique_ptr<Layer> NewConv2dRelu(std::string name, int out_channels,
                                     int kernel, int pad, int stride,
                                     bool bias) {
  return std::make_unique<Conv2dLayer>(std::move(name), out_channels, kernel,
                                       pad, stride, bias, /*relu=*/true);
}
std::unique_ptr<Layer> NewRelu(std::string name) {
  return std::make_unique<ReluLayer>(std::move(name));
}
std::unique_ptr<Layer> NewMaxPool(std::string name, int window, int stride,
                                  int pad) {
  return std::make_unique<PoolLayer>(std::move(name), /*max=*/true, window,
                                     stride, pad);
}
std::unique_ptr<Layer> NewAvgPool(std::string name, int window, int stride,
                                  int pad) {
  return std::make_unique<PoolLayer>(std::move(name), /*max=*/false, window,
                                     stride, pad);
}
std::unique_ptr<Layer> NewFlatten(std::string name) {
  return std::make_unique<FlattenLayer>(std::move(name));
}
std::unique_ptr<Layer> NewDense(std::string name, int out_features,
                                bool bias) {
  return std::make_unique<DenseLayer>(std::move(name), out_features, bias);
}

namespace {

// The convolution of `layer` with its ReLU fused in, or null when `layer` is
// not an unfused convolution.
std::unique_ptr<Layer> FusedConv(const Layer* layer) {
  const auto* conv = dynamic_cast<const Conv2dLayer*>(layer);
  if (conv == nullptr || conv->fused_relu()) return nullptr;
  return conv->WithRelu();
}

bool IsRelu(const Layer* layer) {
  return dynamic_cast<const ReluLayer*>(layer) != nullptr;
}

}  // namespace

std::vector<std::unique_ptr<Layer>> FuseConvRelu(
    std::vector<std::unique_ptr<Layer>> layers) {
  std::vector<std::unique_ptr<Layer>> out;
  out.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i + 1 < layers.size() && IsRelu(layers[i + 1].get())) {
      std::unique_ptr<Layer> fused = FusedConv(layers[i].get());
      if (fused != nullptr) {
        out.push_back(std::move(fused));
        ++i;  // The Relu, which has no parameters, is folded in.
        continue;
      }
    }
    out.push_back(std::move(layers[i]));
  }
  return out;
}

std::vector<GraphNode> FuseConvReluGraph(std::vector<GraphNode> nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> readers(n, 0);
  for (const GraphNode& node : nodes) {
    for (int j : node.inputs) {
      if (j >= 0 && j < n) ++readers[j];
    }
  }
  // remap[i]: node i's index after fusion; a fused ReLU maps to its conv.
  std::vector<int> remap(n, -1);
  std::vector<GraphNode> out;
  out.reserve(nodes.size());
  for (int i = 0; i < n; ++i) {
    GraphNode& node = nodes[i];
    if (IsRelu(node.layer.get()) && node.inputs.size() == 1) {
      const int c = node.inputs[0];
      if (c >= 0 && c < i && readers[c] == 1) {
        const Layer* reader = out[remap[c]].layer.get();
        std::unique_ptr<Layer> fused = FusedConv(reader);
        if (fused == nullptr) fused = FusedBatchNormRelu(reader);
        if (fused != nullptr) {
          out[remap[c]].layer = std::move(fused);
          remap[i] = remap[c];
          continue;
        }
      }
    }
    GraphNode moved;
    moved.layer = std::move(node.layer);
    for (int j : node.inputs) {
      // A reference to a later node stays invalid (Model::Create rejects it).
      moved.inputs.push_back(j >= 0 && j < i ? remap[j] : (j < 0 ? j : n));
    }
    remap[i] = static_cast<int>(out.size());
    out.push_back(std::move(moved));
  }
  return out;
}

}  // namespace downpour
