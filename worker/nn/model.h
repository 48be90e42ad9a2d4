// File: worker/nn/model.h
//
// A feed-forward network as a list of layers over a Backend. The model owns
// one flat parameter buffer and one flat gradient buffer in backend memory;
// each layer's tensors are views into them, in the order of param_specs(), so
// the flat vector is exactly the layout the parameter servers shard
// (common/sharding.h).
//
// Usage:
//   std::unique_ptr<Backend> cpu = NewOpenblasBackend(0);
//   DP_ASSIGN_OR_RETURN(auto model, BuildModel("fashion_cnn", cpu.get(), 64));
//   std::vector<float> init = model->InitialParameters(/*seed=*/1);
//   DP_RETURN_IF_ERROR(model->SetParameters(init));
//   DP_ASSIGN_OR_RETURN(StepResult r, model->ComputeGradients(x, y, 64));
//   // model->gradients() now holds d(mean loss)/d(params) in backend memory.
//
// Thread-safety: none; one thread drives a model.
#ifndef DOWNPOUR_WORKER_NN_MODEL_H_
#define DOWNPOUR_WORKER_NN_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding.h"
#include "worker/nn/backend.h"

namespace downpour {

// Per-example tensor dimensions (C, H, W); dense activations use {n, 1, 1}.
struct Dims {
  int c = 0, h = 0, w = 0;
  int64_t Size() const { return int64_t{c} * h * w; }
  bool operator==(const Dims& o) const {
    return c == o.c && h == o.h && w == o.w;
  }
};

// How a parameter tensor is initialized.
enum class Init { kZeros, kHeUniform };

struct ParamSpec {
  std::string suffix;  // "weight" or "bias"; full name is "<layer>.<suffix>".
  std::vector<int64_t> shape;
  Init init = Init::kZeros;
  int64_t fan_in = 1;  // For kHeUniform: U(-sqrt(6/fan_in), +sqrt(6/fan_in)).
};

// One layer. Forward/Backward work on a batch of `batch` examples stored
// contiguously (NCHW). Layers hold views into the model's buffers, set by
// Bind(); they own any scratch memory they need.
class Layer {
 public:
  virtual ~Layer() = default;
  virtual const std::string& name() const = 0;
  // Fixes the input dims; returns the output dims or an error.
  virtual absl::StatusOr<Dims> Configure(const Dims& in) = 0;
  virtual std::vector<ParamSpec> Params() const = 0;
  // params[i] / grads[i] point at the storage of Params()[i].
  virtual absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                            const std::vector<float*>& grads,
                            int max_batch) = 0;
  virtual absl::Status Forward(int batch, const float* x, float* y) = 0;
  // Writes (overwrites) this layer's parameter gradients and, when dx is not
  // null, the gradient w.r.t. the input. x and y are Forward's input/output.
  virtual absl::Status Backward(int batch, const float* x, const float* y,
                                const float* dy, float* dx) = 0;
};

std::unique_ptr<Layer> NewConv2d(std::string name, int out_channels,
                                 int kernel, int pad);
std::unique_ptr<Layer> NewRelu(std::string name);
// NewConv2d followed by NewRelu as one layer: its parameters are exactly
// NewConv2d's ("<name>.weight", "<name>.bias"), its results those of the pair
// up to float rounding. The forward pass is the backend's Conv2dReluForward
// (on the oneDNN backend, one convolution with the ReLU as its post-op: no
// separate pass over the activations, no pre-activation buffer); the backward
// pass is the ReLU's backward from the fused output, then the convolution's.
std::unique_ptr<Layer> NewConv2dRelu(std::string name, int out_channels,
                                     int kernel, int pad);
std::unique_ptr<Layer> NewMaxPool(std::string name, int window);
// Flattens C,H,W into a vector (a no-op on NCHW memory).
std::unique_ptr<Layer> NewFlatten(std::string name);
std::unique_ptr<Layer> NewDense(std::string name, int out_features);

// The model-building step that fuses: `layers` with each NewConv2d layer
// directly followed by a NewRelu layer replaced by one NewConv2dRelu of the
// convolution's name and configuration. Parameter names and the flat
// parameter layout are unchanged (a Relu has no parameters); the Relu's name
// is dropped. Takes layers not yet given to Model::Create.
std::vector<std::unique_ptr<Layer>> FuseConvRelu(
    std::vector<std::unique_ptr<Layer>> layers);

struct StepResult {
  // Mean softmax cross-entropy over the batch; against the smoothed target
  // in ComputeGradients when the model has label smoothing (Evaluate's is
  // always the plain cross-entropy).
  float loss = 0;
  int64_t correct = 0;   // Examples whose argmax equals the label.
};

class Model {
 public:
  // Takes ownership of the layers; `backend` must outlive the model.
  // The last layer's output size is the number of classes. ComputeGradients
  // trains against targets smoothed by `label_smoothing` in [0, 1)
  // (Backend::SoftmaxCrossEntropy).
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      Backend* backend, std::vector<std::unique_ptr<Layer>> layers,
      Dims input, int max_batch, float label_smoothing = 0.0f);
  virtual ~Model() = default;

  // Parameter tensors in flat order, named "<layer>.<suffix>".
  virtual const std::vector<TensorSpec>& param_specs() const = 0;
  virtual int64_t num_parameters() const = 0;
  virtual Dims input_dims() const = 0;
  virtual int num_classes() const = 0;
  virtual int max_batch() const = 0;
  virtual Backend* backend() const = 0;

  // Deterministic initial values for `seed` (host memory, flat order).
  virtual std::vector<float> InitialParameters(uint64_t seed) const = 0;
  // Copies host values (num_parameters() floats) into the parameter buffer.
  virtual absl::Status SetParameters(absl::Span<const float> host) = 0;
  virtual absl::Status GetParameters(absl::Span<float> host) const = 0;

  // Backend memory of the flat parameters / gradients.
  virtual float* parameters() = 0;
  virtual float* gradients() = 0;

  // Forward and backward on a batch from host memory: host_x holds
  // batch * input_dims().Size() floats, host_labels batch class indices.
  // Gradients of the mean loss overwrite gradients().
  virtual absl::StatusOr<StepResult> ComputeGradients(const float* host_x,
                                                      const int32_t* host_labels,
                                                      int batch) = 0;
  // Forward only.
  virtual absl::StatusOr<StepResult> Evaluate(const float* host_x,
                                              const int32_t* host_labels,
                                              int batch) = 0;
};

struct BuildModelOptions {
  // Each convolution and the ReLU after it run as one layer (FuseConvRelu):
  // the same parameters and, up to float rounding, the same results, one
  // pass over the activations fewer. false keeps them separate (the
  // reference the fused path is tested against).
  bool fuse_conv_relu = true;
  // Label smoothing of the training loss (Model::Create), in [0, 1).
  float label_smoothing = 0.0f;
};

// Known architectures (layer and parameter names in brackets):
//
// "fashion_cnn", on 1x28x28 input (Fashion-MNIST), 225,034 parameters:
//   conv 3x3x32 + ReLU + 2x2 max-pool, conv 3x3x64 + ReLU + 2x2 max-pool,
//   dense 128 + ReLU, dense 10 (valid padding: 28 -> 26 -> 13 -> 11 -> 5;
//   64*5*5 = 1600 features) [conv1, conv2, fc1, fc2].
//
// "cifar_vgg", on 3x32x32 input (CIFAR-10), 2,196,810 parameters: a small
//   VGG-11-like net of three blocks, each two 3x3 convs with padding 1 (size
//   kept) + ReLU and a 2x2 max-pool, at 64, 128 and 256 channels
//   (32 -> 16 -> 8 -> 4), then flatten (256*4*4 = 4096), dense 256 + ReLU,
//   dense 10 [conv1 .. conv6, fc1, fc2]. About 0.3 GFLOP per example forward.
absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const std::string& name, Backend* backend, int max_batch,
    const BuildModelOptions& options = {});

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_MODEL_H_
