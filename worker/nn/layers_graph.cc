// File: worker/nn/layers_graph.cc
//
// The layers of graphs and regularization declared in model.h: batch
// normalization, dropout, global average pooling, and the two layers of
// several inputs, add and concat.
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
#include "worker/nn/layer_base.h"
#include "worker/nn/model.h"

namespace downpour {
namespace {

// PyTorch's BatchNorm2d over channels (BatchNorm1d for N x C x 1 x 1),
// optionally followed by a ReLU in the same layer (`relu`: the backend's
// BatchNormRelu* forwards, and a backward that masks dy by y > 0 into mask_
// first, as Conv2dLayer's fused ReLU). The batch statistics of the last
// training Forward are kept (save_mean_, save_invstd_) for Backward.
class BatchNormLayer : public UnaryLayer {
 public:
  BatchNormLayer(std::string name, float eps, float momentum, bool relu)
      : UnaryLayer(std::move(name)),
        eps_(eps),
        momentum_(momentum),
        relu_(relu) {}

  bool fused_relu() const { return relu_; }
  // This layer with the ReLU fused in (not configured nor bound).
  std::unique_ptr<Layer> WithRelu() const {
    return std::make_unique<BatchNormLayer>(name_, eps_, momentum_, true);
  }

  std::vector<ParamSpec> Params() const override {
    return {{"weight", {in_.c}, Init::kOnes, 1},
            {"bias", {in_.c}, Init::kZeros, 1}};
  }
  std::vector<ParamSpec> State() const override {
    return {{"running_mean", {in_.c}, Init::kZeros, 1},
            {"running_var", {in_.c}, Init::kOnes, 1}};
  }

  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    DP_RETURN_IF_ERROR(BindCommon(backend, params, grads, max_batch));
    gamma_ = params[0];
    beta_ = params[1];
    dgamma_ = grads[0];
    dbeta_ = grads[1];
    DP_ASSIGN_OR_RETURN(save_mean_, DeviceBuffer::Create(backend, in_.c));
    DP_ASSIGN_OR_RETURN(save_invstd_, DeviceBuffer::Create(backend, in_.c));
    return absl::OkStatus();
  }

  absl::Status BindState(const std::vector<float*>& state) override {
    if (state.size() != 2 || state[0] == nullptr || state[1] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_norm ", name_, ": expected 2 state views"));
    }
    running_mean_ = state[0];
    running_var_ = state[1];
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    if (!(eps_ > 0.f) || !(momentum_ >= 0.f && momentum_ <= 1.f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_norm ", name_, ": bad eps=", eps_,
                       " momentum=", momentum_));
    }
    in_ = in;
    configured_ = true;
    return in;
  }

  absl::Status ForwardOne(const ForwardPass& pass, int batch, const float* x,
                          float* y) override {
    if (running_mean_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch_norm ", name_, ": state not bound"));
    }
    const BatchNormDesc d = Desc(batch);
    if (!pass.training) {
      if (relu_) {
        return backend_->BatchNormReluForwardInference(
            d, x, gamma_, beta_, running_mean_, running_var_, y);
      }
      return backend_->BatchNormForwardInference(d, x, gamma_, beta_,
                                                 running_mean_, running_var_,
                                                 y);
    }
    if (int64_t{batch} * d.spatial < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_norm ", name_,
          ": training needs more than one value per channel (batch ", batch,
          " of ", in_.c, "x", in_.h, "x", in_.w, ")"));
    }
    const float momentum =
        pass.stats_momentum >= 0.f ? pass.stats_momentum : momentum_;
    if (relu_) {
      return backend_->BatchNormReluForwardTraining(
          d, x, gamma_, beta_, momentum, running_mean_, running_var_, y,
          save_mean_.data(), save_invstd_.data());
    }
    return backend_->BatchNormForwardTraining(
        d, x, gamma_, beta_, momentum, running_mean_, running_var_, y,
        save_mean_.data(), save_invstd_.data());
  }

  absl::Status BackwardOne(int batch, const float* x, const float* y,
                           const float* dy, float* dx) override {
    if (relu_) {
      DP_ASSIGN_OR_RETURN(
          dy, FusedReluGradient(backend_, max_batch_ * in_.Size(),
                                batch * in_.Size(), y, dy, &mask_));
    }
    // The backend writes dx always; without a reader it goes to scratch.
    float* out = dx;
    if (out == nullptr) {
      DP_RETURN_IF_ERROR(
          EnsureBuffer(backend_, max_batch_ * in_.Size(), &scratch_));
      out = scratch_.data();
    }
    return backend_->BatchNormBackward(Desc(batch), x, dy, gamma_,
                                       save_mean_.data(), save_invstd_.data(),
                                       out, dgamma_, dbeta_);
  }

 private:
  BatchNormDesc Desc(int batch) const {
    BatchNormDesc d;
    d.batch = batch;
    d.channels = in_.c;
    d.spatial = in_.h * in_.w;
    d.eps = eps_;
    return d;
  }

  const float eps_, momentum_;
  const bool relu_;
  DeviceBuffer mask_;  // With relu_: dy masked by y > 0, max_batch rows.
  const float* gamma_ = nullptr;
  const float* beta_ = nullptr;
  float* dgamma_ = nullptr;
  float* dbeta_ = nullptr;
  float* running_mean_ = nullptr;  // Model state; not owned.
  float* running_var_ = nullptr;   // Model state; not owned.
  DeviceBuffer save_mean_, save_invstd_;  // in_.c each.
  DeviceBuffer scratch_;  // dx when the input needs no gradient.
};

// Inverted dropout with a mask from (pass.seed, element) (DropoutMask).
class DropoutLayer : public ParameterlessLayer {
 public:
  DropoutLayer(std::string name, float rate)
      : ParameterlessLayer(std::move(name)), rate_(rate) {}

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    if (!(rate_ >= 0.f && rate_ < 1.f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dropout ", name_, ": rate ", rate_,
                       " is not in [0, 1)"));
    }
    in_ = in;
    configured_ = true;
    return in;
  }

  absl::Status ForwardOne(const ForwardPass& pass, int batch, const float* x,
                          float* y) override {
    const int64_t n = batch * in_.Size();
    masked_ = pass.training && rate_ > 0.f;
    if (!masked_) return backend_->Copy(x, y, n);
    DP_RETURN_IF_ERROR(EnsureBuffer(backend_, max_batch_ * in_.Size(), &mask_));
    DP_RETURN_IF_ERROR(
        backend_->DropoutMask(n, rate_, pass.seed, mask_.data()));
    return backend_->Multiply(n, x, mask_.data(), y);
  }

  absl::Status BackwardOne(int batch, const float* /*x*/, const float* /*y*/,
                           const float* dy, float* dx) override {
    if (dx == nullptr) return absl::OkStatus();
    const int64_t n = batch * in_.Size();
    if (!masked_) return backend_->Copy(dy, dx, n);
    return backend_->Multiply(n, dy, mask_.data(), dx);
  }

 private:
  const float rate_;
  bool masked_ = false;  // Whether the last Forward applied mask_.
  DeviceBuffer mask_;    // max_batch rows; from the first training pass.
};

// The mean over H x W per (example, channel), as a GEMM with a vector of
// 1 / (H * W): y[NC] = x[NC, HW] * v and dx[NC, HW] = dy[NC] * v^T.
class GlobalAvgPoolLayer : public ParameterlessLayer {
 public:
  using ParameterlessLayer::ParameterlessLayer;

 protected:
  absl::StatusOr<Dims> ConfigureOne(const Dims& in) override {
    in_ = in;
    configured_ = true;
    return Dims{in.c, 1, 1};
  }

  absl::Status ForwardOne(const ForwardPass& /*pass*/, int batch,
                          const float* x, float* y) override {
    DP_RETURN_IF_ERROR(EnsureWeights());
    const int spatial = in_.h * in_.w;
    return backend_->Gemm(false, false, batch * in_.c, 1, spatial, 1.f, x,
                          weights_.data(), 0.f, y);
  }

  absl::Status BackwardOne(int batch, const float* /*x*/, const float* /*y*/,
                           const float* dy, float* dx) override {
    if (dx == nullptr) return absl::OkStatus();
    DP_RETURN_IF_ERROR(EnsureWeights());
    const int spatial = in_.h * in_.w;
    return backend_->Gemm(false, false, batch * in_.c, spatial, 1, 1.f, dy,
                          weights_.data(), 0.f, dx);
  }

 private:
  absl::Status EnsureWeights() {
    if (weights_.data() != nullptr) return absl::OkStatus();
    const int spatial = in_.h * in_.w;
    DP_ASSIGN_OR_RETURN(weights_, DeviceBuffer::Create(backend_, spatial));
    return backend_->Fill(weights_.data(), spatial,
                          1.f / static_cast<float>(spatial));
  }

  DeviceBuffer weights_;  // H * W values of 1 / (H * W).
};

// A layer of two or more inputs and no parameters.
class MultiInputLayer : public LayerBase {
 public:
  using LayerBase::LayerBase;
  std::vector<ParamSpec> Params() const override { return {}; }
  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    return BindCommon(backend, params, grads, max_batch);
  }

 protected:
  absl::Status CheckInputs(const std::vector<Dims>& in) const {
    if (in.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", name_, ": takes two or more inputs, got ", in.size()));
    }
    for (const Dims& d : in) DP_RETURN_IF_ERROR(CheckDims(name_, d));
    return absl::OkStatus();
  }

  std::vector<Dims> ins_;
};

class AddLayer : public MultiInputLayer {
 public:
  using MultiInputLayer::MultiInputLayer;

  absl::StatusOr<Dims> Configure(const std::vector<Dims>& in) override {
    DP_RETURN_IF_ERROR(CheckInputs(in));
    for (size_t i = 1; i < in.size(); ++i) {
      if (!(in[i] == in[0])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "add ", name_, ": input ", i, " is ", in[i].c, "x", in[i].h, "x",
            in[i].w, ", input 0 is ", in[0].c, "x", in[0].h, "x", in[0].w));
      }
    }
    ins_ = in;
    in_ = in[0];
    configured_ = true;
    return in[0];
  }

  absl::Status Forward(const ForwardPass& /*pass*/, int batch,
                       const std::vector<const float*>& x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(CheckArity(ins_.size(), x, nullptr));
    const int64_t n = batch * in_.Size();
    DP_RETURN_IF_ERROR(backend_->Copy(x[0], y, n));
    for (size_t i = 1; i < x.size(); ++i) {
      DP_RETURN_IF_ERROR(backend_->Axpy(n, 1.f, x[i], y));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(int batch, const std::vector<const float*>& x,
                        const float* /*y*/, const float* dy,
                        const std::vector<float*>& dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(CheckArity(ins_.size(), x, &dx));
    const int64_t n = batch * in_.Size();
    for (float* d : dx) {
      if (d != nullptr) DP_RETURN_IF_ERROR(backend_->Copy(dy, d, n));
    }
    return absl::OkStatus();
  }
};

// Along channels: input i's C_i x H x W block goes to channels
// [offset_i, offset_i + C_i) of each example (a strided row copy).
class ConcatLayer : public MultiInputLayer {
 public:
  using MultiInputLayer::MultiInputLayer;

  absl::StatusOr<Dims> Configure(const std::vector<Dims>& in) override {
    DP_RETURN_IF_ERROR(CheckInputs(in));
    int64_t channels = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].h != in[0].h || in[i].w != in[0].w) {
        return absl::InvalidArgumentError(absl::StrCat(
            "concat ", name_, ": input ", i, " is ", in[i].h, "x", in[i].w,
            " spatially, input 0 is ", in[0].h, "x", in[0].w));
      }
      channels += in[i].c;
    }
    if (channels > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("concat ", name_, ": too many channels"));
    }
    ins_ = in;
    in_ = Dims{static_cast<int>(channels), in[0].h, in[0].w};
    configured_ = true;
    return in_;
  }

  absl::Status Forward(const ForwardPass& /*pass*/, int batch,
                       const std::vector<const float*>& x, float* y) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(CheckArity(ins_.size(), x, nullptr));
    int64_t offset = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t cols = ins_[i].Size();
      DP_RETURN_IF_ERROR(
          backend_->CopyRows(batch, cols, x[i], cols, y + offset, in_.Size()));
      offset += cols;
    }
    return absl::OkStatus();
  }

  absl::Status Backward(int batch, const std::vector<const float*>& x,
                        const float* /*y*/, const float* dy,
                        const std::vector<float*>& dx) override {
    DP_RETURN_IF_ERROR(CheckRun(batch));
    DP_RETURN_IF_ERROR(CheckArity(ins_.size(), x, &dx));
    int64_t offset = 0;
    for (size_t i = 0; i < dx.size(); ++i) {
      const int64_t cols = ins_[i].Size();
      if (dx[i] != nullptr) {
        DP_RETURN_IF_ERROR(backend_->CopyRows(batch, cols, dy + offset,
                                              in_.Size(), dx[i], cols));
      }
      offset += cols;
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Layer> NewBatchNorm(std::string name, float eps,
                                    float momentum) {
  return std::make_unique<BatchNormLayer>(std::move(name), eps, momentum,
                                          /*relu=*/false);
}

std::unique_ptr<Layer> FusedBatchNormRelu(const Layer* layer) {
  const auto* bn = dynamic_cast<const BatchNormLayer*>(layer);
  if (bn == nullptr || bn->fused_relu()) return nullptr;
  return bn->WithRelu();
}
std::unique_ptr<Layer> NewDropout(std::string name, float rate) {
  return std::make_unique<DropoutLayer>(std::move(name), rate);
}
std::unique_ptr<Layer> NewGlobalAvgPool(std::string name) {
  return std::make_unique<GlobalAvgPoolLayer>(std::move(name));
}
std::unique_ptr<Layer> NewAdd(std::string name) {
  return std::make_unique<AddLayer>(std::move(name));
}
std::unique_ptr<Layer> NewConcat(std::string name) {
  return std::make_unique<ConcatLayer>(std::move(name));
}

}  // namespace downpour
