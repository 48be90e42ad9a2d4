// File: worker/nn/layers.cc
//
// The layer implementations declared in model.h. Layers are thin: they
// translate their configuration into backend calls and hold views (set by
// Bind) of the model's parameter and gradient buffers. Scratch memory for the
// convolution lowering lives inside the backend; the only buffer a layer owns
// is a fused Conv2d + ReLU's masked gradient. FuseConvRelu, the model-building
// step that fuses, is here too: it recognizes the layer classes.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"

namespace downpour {
namespace {

absl::Status CheckDims(const std::string& name, const Dims& in) {
  if (in.c < 1 || in.h < 1 || in.w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", name, ": bad input dims ", in.c, "x", in.h, "x", in.w));
  }
  return absl::OkStatus();
}

// Common bookkeeping: name, configured input dims, bound backend.
class LayerBase : public Layer {
 public:
  explicit LayerBase(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

 protected:
  // Checks that Bind got exactly Params().size() non-null views.
  absl::Status BindCommon(Backend* backend, const std::vector<float*>& params,
                          const std::vector<float*>& grads, int max_batch) {
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

  absl::Status CheckRun(int batch) const {
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

  std::string name_;
  Dims in_;
  bool configured_ = false;
  Backend* backend_ = nullptr;  // Not owned.
  int max_batch_ = 0;
};

// A layer whose Params() are exactly {weight, bias}: binds the views.
class WeightBiasLayer : public LayerBase {
 public:
  using LayerBase::LayerBase;
  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    DP_RETURN_IF_ERROR(BindCommon(backend, params, grads, max_batch));
    w_ = params[0];
    b_ = params[1];
    dw_ = grads[0];
    db_ = grads[1];
    return absl::OkStatus();
  }

 protected:
  const float* w_ = nullptr;
  const float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

// A layer without parameters: binds only the backend.
class ParameterlessLayer : public LayerBase {
 public:
  using LayerBase::LayerBase;
  std::vector<ParamSpec> Params() const override { return {}; }
  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    return BindCommon(backend, params, grads, max_batch);
  }
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
              bool relu)
      : WeightBiasLayer(std::move(name)),
        out_channels_(out_channels),
        kernel_(kernel),
        pad_(pad),
        relu_(relu) {}

  bool fused_relu() const { return relu_; }
  // This convolution with the ReLU fused in (not configured nor bound).
  std::unique_ptr<Layer> WithRelu() const {
    return std::make_unique<Conv2dLayer>(name_, out_channels_, kernel_, pad_,
                                         /*relu=*/true);
  }

  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    mask_ = DeviceBuffer();  // Of the previous binding's backend, if any.
    return WeightBiasLayer::Bind(backend, params, grads, max_batch);
  }

  absl::StatusOr<Dims> Configure(const Dims& in) override {
    DP_RETURN_IF_ERROR(CheckDims(name_, in));
    if (out_channels_ < 1 || kernel_ < 1 || pad_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv ", name_, ": bad out_channels=", out_channels_,
                       " kernel=", kernel_, " pad=", pad_));
    }
    in_ = in;
    const ConvDesc d = Desc(1);
    if (in.h + 2 * pad_ < kernel_ || in.w + 2 * pad_ < kernel_) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv ", name_, ": kernel ", kernel_,
                       " larger than padded input ", in.h, "x", in.w));
    }
    configured_ = true;
    return Dims{out_channels_, d.OutH(), d.OutW()};
  }

  std::vector<ParamSpec> Params() const override {
    const int64_t fan_in = int64_t{in_.c} * kernel_ * kernel_;
    return {
        {"weight",
         {out_channels_, in_.c, kernel_, kernel_},
         Init::kHeUniform,
         fan_in},
        {"bias", {out_channels_}, Init::kZeros, fan_in},
    };
  }

  absl::Status Forward(int batch, const float* x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    if (relu_) return backend_->Conv2dReluForward(Desc(batch), x, w_, b_, y);
    return backend_->Conv2dForward(Desc(batch), x, w_, b_, y);
  }

  absl::Status Backward(int batch, const float* x, const float* y,
                        const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    const ConvDesc d = Desc(batch);
    if (relu_) {
      // The ReLU's backward from the fused output: what an unfused Relu
      // layer wrote into the model's gradient buffer goes to mask_. It takes
      // the place of the pre-activation buffer the fusion saves, and is
      // allocated on the first Backward, so that a forward-only (evaluation)
      // model does without it.
      const int64_t per_example = int64_t{out_channels_} * d.OutH() * d.OutW();
      if (mask_.data() == nullptr) {
        DP_ASSIGN_OR_RETURN(
            mask_, DeviceBuffer::Create(backend_, max_batch_ * per_example));
      }
      // The last step's mask (of a possibly larger batch) is dead.
      DP_RETURN_IF_ERROR(backend_->Discard(mask_.data(), mask_.size()));
      DP_RETURN_IF_ERROR(
          backend_->ReluBackward(batch * per_example, y, dy, mask_.data()));
      dy = mask_.data();
    }
    DP_RETURN_IF_ERROR(backend_->Conv2dBackwardFilter(d, x, dy, dw_, db_));
    if (dx != nullptr) {
      DP_RETURN_IF_ERROR(backend_->Conv2dBackwardData(d, w_, dy, dx));
    }
    return absl::OkStatus();
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
    d.stride = 1;
    d.pad = pad_;
    return d;
  }

  const int out_channels_, kernel_, pad_;
  const bool relu_;
  DeviceBuffer mask_;  // With relu_: dy masked by y > 0, max_batch rows.
};

class ReluLayer : public ParameterlessLayer {
 public:
  using ParameterlessLayer::ParameterlessLayer;

  absl::StatusOr<Dims> Configure(const Dims& in) override {
    DP_RETURN_IF_ERROR(CheckDims(name_, in));
    in_ = in;
    configured_ = true;
    return in;
  }
  absl::Status Forward(int batch, const float* x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    return backend_->ReluForward(batch * in_.Size(), x, y);
  }
  absl::Status Backward(int batch, const float* /*x*/, const float* y,
                        const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    if (dx == nullptr) return absl::OkStatus();
    return backend_->ReluBackward(batch * in_.Size(), y, dy, dx);
  }
};

class MaxPoolLayer : public ParameterlessLayer {
 public:
  MaxPoolLayer(std::string name, int window)
      : ParameterlessLayer(std::move(name)), window_(window) {}

  absl::StatusOr<Dims> Configure(const Dims& in) override {
    DP_RETURN_IF_ERROR(CheckDims(name_, in));
    if (window_ < 1 || in.h < window_ || in.w < window_) {
      return absl::InvalidArgumentError(
          absl::StrCat("maxpool ", name_, ": window ", window_,
                       " does not fit input ", in.h, "x", in.w));
    }
    in_ = in;
    configured_ = true;
    return Dims{in.c, in.h / window_, in.w / window_};
  }
  absl::Status Forward(int batch, const float* x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    return backend_->MaxPoolForward(Desc(batch), x, y);
  }
  absl::Status Backward(int batch, const float* x, const float* y,
                        const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    if (dx == nullptr) return absl::OkStatus();
    return backend_->MaxPoolBackward(Desc(batch), x, y, dy, dx);
  }

 private:
  PoolDesc Desc(int batch) const {
    PoolDesc d;
    d.batch = batch;
    d.channels = in_.c;
    d.in_h = in_.h;
    d.in_w = in_.w;
    d.window = window_;
    return d;
  }
  const int window_;
};

// dst = src on backend memory (a device-to-device copy on a GPU).
absl::Status BackendCopy(Backend* backend, const float* src, float* dst,
                         int64_t n) {
  return backend->Copy(src, dst, n);
}

// NCHW memory already is the flattened layout, so Flatten only copies (the
// Layer interface gives it separate x and y buffers).
class FlattenLayer : public ParameterlessLayer {
 public:
  using ParameterlessLayer::ParameterlessLayer;

  absl::StatusOr<Dims> Configure(const Dims& in) override {
    DP_RETURN_IF_ERROR(CheckDims(name_, in));
    in_ = in;
    configured_ = true;
    return Dims{static_cast<int>(in.Size()), 1, 1};
  }
  absl::Status Forward(int batch, const float* x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    return BackendCopy(backend_, x, y, batch * in_.Size());
  }
  absl::Status Backward(int batch, const float* /*x*/, const float* /*y*/,
                        const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    if (dx == nullptr) return absl::OkStatus();
    return BackendCopy(backend_, dy, dx, batch * in_.Size());
  }
};

class DenseLayer : public WeightBiasLayer {
 public:
  DenseLayer(std::string name, int out_features)
      : WeightBiasLayer(std::move(name)), out_(out_features) {}

  absl::StatusOr<Dims> Configure(const Dims& in) override {
    DP_RETURN_IF_ERROR(CheckDims(name_, in));
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

  std::vector<ParamSpec> Params() const override {
    return {
        {"weight", {out_, in_features_}, Init::kHeUniform, in_features_},
        {"bias", {out_}, Init::kZeros, in_features_},
    };
  }

  // y[batch, out] = x[batch, in] * W^T + b.
  absl::Status Forward(int batch, const float* x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(backend_->Gemm(false, true, batch, out_, in_features_,
                                      1.f, x, w_, 0.f, y));
    return backend_->AddRowBias(batch, out_, b_, y);
  }

  // dW = dy^T x, db = column sums of dy, dx = dy W.
  absl::Status Backward(int batch, const float* x, const float* /*y*/,
                        const float* dy, float* dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(backend_->Gemm(true, false, out_, in_features_, batch,
                                      1.f, dy, x, 0.f, dw_));
    DP_RETURN_IF_ERROR(backend_->ColumnSum(batch, out_, dy, db_));
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
                                 int pad) {
  return std::make_unique<Conv2dLayer>(std::move(name), out_channels, kernel,
                                       pad, /*relu=*/false);
}
std::unique_ptr<Layer> NewConv2dRelu(std::string name, int out_channels,
                                     int kernel, int pad) {
  return std::make_unique<Conv2dLayer>(std::move(name), out_channels, kernel,
                                       pad, /*relu=*/true);
}
std::unique_ptr<Layer> NewRelu(std::string name) {
  return std::make_unique<ReluLayer>(std::move(name));
}
std::unique_ptr<Layer> NewMaxPool(std::string name, int window) {
  return std::make_unique<MaxPoolLayer>(std::move(name), window);
}
std::unique_ptr<Layer> NewFlatten(std::string name) {
  return std::make_unique<FlattenLayer>(std::move(name));
}
std::unique_ptr<Layer> NewDense(std::string name, int out_features) {
  return std::make_unique<DenseLayer>(std::move(name), out_features);
}

std::vector<std::unique_ptr<Layer>> FuseConvRelu(
    std::vector<std::unique_ptr<Layer>> layers) {
  std::vector<std::unique_ptr<Layer>> out;
  out.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto* conv = dynamic_cast<const Conv2dLayer*>(layers[i].get());
    if (conv != nullptr && !conv->fused_relu() && i + 1 < layers.size() &&
        dynamic_cast<const ReluLayer*>(layers[i + 1].get()) != nullptr) {
      out.push_back(conv->WithRelu());
      ++i;  // The Relu, which has no parameters, is folded in.
      continue;
    }
    out.push_back(std::move(layers[i]));
  }
  return out;
}

}  // namespace downpour
