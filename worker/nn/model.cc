// File: worker/nn/model.cc
//
// Model::Create (a sequential network over a Backend) and BuildModel, the
// registry of named architectures.
#include "worker/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_allocator.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

// splitmix64 finalizer: decorrelates (seed, tensor index) pairs.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class ModelImpl : public Model {
 public:
  ModelImpl(Backend* backend, std::vector<std::unique_ptr<Layer>> layers,
            Dims input, int max_batch, float label_smoothing)
      : backend_(backend),
        layers_(std::move(layers)),
        input_(input),
        max_batch_(max_batch),
        label_smoothing_(label_smoothing) {}

  // Configures and binds the layers and allocates every buffer.
  absl::Status Init() {
    // Shapes and parameter layout.
    Dims dims = input_;
    std::set<std::string> names;
    std::vector<size_t> first_param;  // Index into specs_ per layer.
    for (const auto& layer : layers_) {
      absl::StatusOr<Dims> out = layer->Configure(dims);
      if (!out.ok()) return out.status();
      dims = *out;
      out_dims_.push_back(dims);
      first_param.push_back(specs_.size());
      for (ParamSpec& p : layer->Params()) {
        TensorSpec t{absl::StrCat(layer->name(), ".", p.suffix), p.shape};
        if (!names.insert(t.name).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("duplicate parameter name ", t.name));
        }
        offsets_.push_back(num_params_);
        num_params_ += t.NumElements();
        specs_.push_back(std::move(t));
        inits_.push_back(std::move(p));
      }
    }
    if (dims.Size() < 1 || dims.Size() > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError("model output size out of range");
    }
    classes_ = static_cast<int>(dims.Size());

    // Buffers.
    DP_ASSIGN_OR_RETURN(params_, DeviceBuffer::Create(backend_, num_params_));
    DP_ASSIGN_OR_RETURN(grads_, DeviceBuffer::Create(backend_, num_params_));
    DP_ASSIGN_OR_RETURN(
        input_buf_, DeviceBuffer::Create(backend_, max_batch_ * input_.Size()));
    DP_ASSIGN_OR_RETURN(labels_buf_,
                        DeviceBuffer::Create(backend_, max_batch_));
    DP_ASSIGN_OR_RETURN(
        dlogits_,
        DeviceBuffer::Create(backend_, int64_t{max_batch_} * classes_));
    int64_t max_hidden = 1;  // Largest input of any layer but the first.
    for (size_t i = 0; i < layers_.size(); ++i) {
      const int64_t n = max_batch_ * out_dims_[i].Size();
      DP_ASSIGN_OR_RETURN(DeviceBuffer act, DeviceBuffer::Create(backend_, n));
      acts_.push_back(std::move(act));
      if (i + 1 < layers_.size()) max_hidden = std::max(max_hidden, n);
    }
    DP_ASSIGN_OR_RETURN(grad_a_, DeviceBuffer::Create(backend_, max_hidden));
    DP_ASSIGN_OR_RETURN(grad_b_, DeviceBuffer::Create(backend_, max_hidden));
    // Pinned on a GPU, so the label copy does not stall the host.
    DP_ASSIGN_OR_RETURN(host_labels_,
                        HostArray<float>::Create(backend_->staging_allocator(),
                                                 max_batch_));

    // Views.
    for (size_t i = 0; i < layers_.size(); ++i) {
      const size_t end =
          i + 1 < layers_.size() ? first_param[i + 1] : specs_.size();
      std::vector<float*> p, g;
      for (size_t t = first_param[i]; t < end; ++t) {
        p.push_back(params_.data() + offsets_[t]);
        g.push_back(grads_.data() + offsets_[t]);
      }
      DP_RETURN_IF_ERROR(layers_[i]->Bind(backend_, p, g, max_batch_));
    }
    return absl::OkStatus();
  }

  const std::vector<TensorSpec>& param_specs() const override { return specs_; }
  int64_t num_parameters() const override { return num_params_; }
  Dims input_dims() const override { return input_; }
  int num_classes() const override { return classes_; }
  int max_batch() const override { return max_batch_; }
  Backend* backend() const override { return backend_; }

  std::vector<float> InitialParameters(uint64_t seed) const override {
    std::vector<float> out(num_params_, 0.f);
    for (size_t t = 0; t < inits_.size(); ++t) {
      const ParamSpec& p = inits_[t];
      if (p.init != Init::kHeUniform) continue;  // kZeros: already zero.
      const double bound =
          std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(1, p.fan_in)));
      std::mt19937_64 rng(Mix(seed) ^ Mix(0x1000 + t));
      float* dst = out.data() + offsets_[t];
      for (int64_t i = 0; i < specs_[t].NumElements(); ++i) {
        // 53 random bits -> u in [0, 1), mapped to [-bound, bound).
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        dst[i] = static_cast<float>((2.0 * u - 1.0) * bound);
      }
    }
    return out;
  }

  absl::Status SetParameters(absl::Span<const float> host) override {
    if (static_cast<int64_t>(host.size()) != num_params_) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetParameters: got ", host.size(),
                       " values, model has ", num_params_));
    }
    return backend_->CopyToDevice(host.data(), params_.data(), num_params_);
  }

  absl::Status GetParameters(absl::Span<float> host) const override {
    if (static_cast<int64_t>(host.size()) != num_params_) {
      return absl::InvalidArgumentError(
          absl::StrCat("GetParameters: got room for ", host.size(),
                       " values, model has ", num_params_));
    }
    DP_RETURN_IF_ERROR(
        backend_->CopyToHost(params_.data(), host.data(), num_params_));
    return backend_->Synchronize();
  }

  float* parameters() override { return params_.data(); }
  float* gradients() override { return grads_.data(); }

  // Waits for the device once, at the end: the loss is queued (deferred)
  // and settled by the final Synchronize.
  absl::StatusOr<StepResult> ComputeGradients(const float* host_x,
                                              const int32_t* host_labels,
                                              int batch) override {
    StepResult r;
    DP_RETURN_IF_ERROR(LoadBatch(host_x, host_labels, batch));
    DP_RETURN_IF_ERROR(Forward(batch));
    DP_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropyDeferred(
        batch, classes_, acts_.back().data(), labels_buf_.data(),
        label_smoothing_, dlogits_.data(), &r.loss, &r.correct));
    const float* dy = dlogits_.data();
    for (size_t i = layers_.size(); i-- > 0;) {
      float* dx = nullptr;
      if (i > 0) {
        DeviceBuffer& next = dy == grad_a_.data() ? grad_b_ : grad_a_;
        // The ping-pong buffer's last tensor (of another shape) is dead.
        DP_RETURN_IF_ERROR(backend_->Discard(next.data(), next.size()));
        dx = next.data();
      }
      const float* x = i == 0 ? input_buf_.data() : acts_[i - 1].data();
      DP_RETURN_IF_ERROR(
          layers_[i]->Backward(batch, x, acts_[i].data(), dy, dx));
      dy = dx;
    }
    DP_RETURN_IF_ERROR(backend_->Synchronize());
    return r;
  }

  absl::StatusOr<StepResult> Evaluate(const float* host_x,
                                      const int32_t* host_labels,
                                      int batch) override {
    return ForwardLoss(host_x, host_labels, batch, /*dlogits=*/nullptr);
  }

 private:
  // Loads the batch and runs the forward pass and the loss; writes the
  // loss's gradient into `dlogits` unless it is null. Waits for the result.
  absl::StatusOr<StepResult> ForwardLoss(const float* host_x,
                                         const int32_t* host_labels, int batch,
                                         float* dlogits) {
    DP_RETURN_IF_ERROR(LoadBatch(host_x, host_labels, batch));
    DP_RETURN_IF_ERROR(Forward(batch));
    StepResult r;
    DP_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
        batch, classes_, acts_.back().data(), labels_buf_.data(),
        /*label_smoothing=*/0.0f, dlogits, &r.loss, &r.correct));
    return r;
  }

  absl::Status LoadBatch(const float* host_x, const int32_t* host_labels,
                         int batch) {
    if (batch < 1 || batch > max_batch_) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch size ", batch, " not in [1, ", max_batch_, "]"));
    }
    if (host_x == nullptr || host_labels == nullptr) {
      return absl::InvalidArgumentError("null input or label pointer");
    }
    // Labels are validated by SoftmaxCrossEntropy; the conversion is exact
    // for every valid index.
    for (int i = 0; i < batch; ++i) {
      host_labels_[i] = static_cast<float>(host_labels[i]);
    }
    DP_RETURN_IF_ERROR(backend_->CopyToDevice(host_x, input_buf_.data(),
                                              batch * input_.Size()));
    return backend_->CopyToDevice(host_labels_.data(), labels_buf_.data(),
                                  batch);
  }

  absl::Status Forward(int batch) {
    const float* x = input_buf_.data();
    for (size_t i = 0; i < layers_.size(); ++i) {
      // Last step's activation (of a possibly larger batch) is dead.
      DP_RETURN_IF_ERROR(backend_->Discard(acts_[i].data(), acts_[i].size()));
      DP_RETURN_IF_ERROR(layers_[i]->Forward(batch, x, acts_[i].data()));
      x = acts_[i].data();
    }
    return absl::OkStatus();
  }

  Backend* const backend_;  // Not owned.
  std::vector<std::unique_ptr<Layer>> layers_;
  const Dims input_;
  const int max_batch_;
  const float label_smoothing_;  // Of the training loss only.

  std::vector<Dims> out_dims_;     // Per layer.
  std::vector<TensorSpec> specs_;  // Flat order.
  std::vector<ParamSpec> inits_;   // Parallel to specs_.
  std::vector<int64_t> offsets_;   // Parallel to specs_, in floats.
  int64_t num_params_ = 0;
  int classes_ = 0;

  DeviceBuffer params_, grads_;
  DeviceBuffer input_buf_;          // max_batch x input.
  DeviceBuffer labels_buf_;         // max_batch class indices as floats.
  DeviceBuffer dlogits_;            // max_batch x classes.
  std::vector<DeviceBuffer> acts_;  // Per layer output, max_batch rows.
  DeviceBuffer grad_a_, grad_b_;    // Ping-pong activation gradients.
  HostArray<float> host_labels_;    // Staging for the label conversion.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    Backend* backend, std::vector<std::unique_ptr<Layer>> layers, Dims input,
    int max_batch, float label_smoothing) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Model::Create: null backend");
  }
  if (layers.empty()) {
    return absl::InvalidArgumentError("Model::Create: no layers");
  }
  for (const auto& l : layers) {
    if (l == nullptr) {
      return absl::InvalidArgumentError("Model::Create: null layer");
    }
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Model::Create: max_batch ", max_batch, " must be >= 1"));
  }
  if (input.c < 1 || input.h < 1 || input.w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::Create: bad input dims ", input.c, "x", input.h, "x", input.w));
  }
  DP_RETURN_IF_ERROR(ValidateLabelSmoothing(label_smoothing));
  auto model = std::make_unique<ModelImpl>(backend, std::move(layers), input,
                                           max_batch, label_smoothing);
  DP_RETURN_IF_ERROR(model->Init());
  return std::unique_ptr<Model>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const std::string& name, Backend* backend, int max_batch,
    const BuildModelOptions& options) {
  static const char* const kKnown[] = {"fashion_cnn", "cifar_vgg"};
  std::vector<std::unique_ptr<Layer>> layers;
  Dims input;
  if (name == "fashion_cnn") {
    layers.push_back(NewConv2d("conv1", 32, 3, 0));
    layers.push_back(NewRelu("relu1"));
    layers.push_back(NewMaxPool("pool1", 2));
    layers.push_back(NewConv2d("conv2", 64, 3, 0));
    layers.push_back(NewRelu("relu2"));
    layers.push_back(NewMaxPool("pool2", 2));
    layers.push_back(NewFlatten("flatten"));
    layers.push_back(NewDense("fc1", 128));
    layers.push_back(NewRelu("relu3"));
    layers.push_back(NewDense("fc2", 10));
    input = Dims{1, 28, 28};
  } else if (name == "cifar_vgg") {
    // Three VGG blocks of two same-padded 3x3 convs and a 2x2 max-pool:
    // 32x32 -> 16x16 -> 8x8 -> 4x4, then a 256-wide hidden dense layer.
    int conv = 0;
    for (const int channels : {64, 128, 256}) {
      for (int i = 0; i < 2; ++i) {
        ++conv;
        layers.push_back(
            NewConv2d(absl::StrCat("conv", conv), channels, 3, /*pad=*/1));
        layers.push_back(NewRelu(absl::StrCat("relu", conv)));
      }
      layers.push_back(NewMaxPool(absl::StrCat("pool", conv / 2), 2));
    }
    layers.push_back(NewFlatten("flatten"));
    layers.push_back(NewDense("fc1", 256));
    layers.push_back(NewRelu("relu_fc1"));
    layers.push_back(NewDense("fc2", 10));
    input = Dims{3, 32, 32};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model \"", name,
                     "\"; known models: ", absl::StrJoin(kKnown, ", ")));
  }
  if (options.fuse_conv_relu) layers = FuseConvRelu(std::move(layers));
  return Model::Create(backend, std::move(layers), input, max_batch,
                       options.label_smoothing);
}

}  // namespace downpour
