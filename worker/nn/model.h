// File: worker/nn/model.h
//
// A network as a graph of layers over a Backend, and its layers. Each node
// reads the outputs of earlier nodes (or the model's input) and writes one
// activation; the last node's output is the logits. The model owns one flat
// parameter buffer and one flat gradient buffer in backend memory; each
// layer's tensors are views into them, in the order of param_specs(), so the
// flat vector is exactly the layout the parameter servers shard
// (common/sharding.h). Layers with running statistics (batch norm) keep them
// in a second flat buffer, the model's state, which is not trained and not
// sharded (docs/design.md says how it is kept across a job).
//
// Models are normally built from a spec (worker/nn/model_builder.h); here is
// the graph API the builder and the tests use:
//   std::unique_ptr<Backend> cpu = NewOpenblasBackend(0);
//   std::vector<GraphNode> g;
//   g.push_back({NewConv2d("conv1", 32, 3, 0), {-1}});     // -1: the input
//   g.push_back({NewRelu("relu1"), {0}});
//   g.push_back({NewDense("fc", 10), {1}});
//   DP_ASSIGN_OR_RETURN(auto model,
//                       Model::Create(cpu.get(), std::move(g), {1, 28, 28}, 64));
//   DP_RETURN_IF_ERROR(model->SetParameters(model->InitialParameters(1)));
//   DP_ASSIGN_OR_RETURN(StepResult r, model->ComputeGradients(x, y, 64));
//   // model->gradients() now holds d(mean loss)/d(params) in backend memory.
//
// Thread-safety: none; one thread drives a model.
#ifndef DOWNPOUR_WORKER_NN_MODEL_H_
#define DOWNPOUR_WORKER_NN_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding.h"
#include "worker/nn/backend.h"
#include "worker/nn/dims.h"

namespace downpour {

// How a parameter or state tensor is initialized.
enum class Init { kZeros, kOnes, kHeUniform };

struct ParamSpec {
  // "weight", "bias", "running_mean", ...; full name "<layer>.<suffix>".
  std::string suffix;
  std::vector<int64_t> shape;
  Init init = Init::kZeros;
  int64_t fan_in = 1;  // For kHeUniform: U(-sqrt(6/fan_in), +sqrt(6/fan_in)).
};

// What a forward pass is for. Training: batch norm normalizes with the
// batch's statistics and moves its running ones, dropout drops. Evaluation:
// batch norm uses the running statistics, dropout is the identity.
struct ForwardPass {
  bool training = false;
  // Dropout's mask seed for this node and step.
  uint64_t seed = 0;
  // When >= 0, batch norm moves its running statistics by this instead of
  // its own momentum (1 / (k + 1) for the k-th batch averages them).
  float stats_momentum = -1.f;
};

// One node's computation. Forward/Backward work on a batch of `batch`
// examples stored contiguously (NCHW), one tensor per input. Layers hold
// views into the model's buffers, set by Bind()/BindState(); they own any
// scratch memory they need.
class Layer {
 public:
  virtual ~Layer() = default;
  virtual const std::string& name() const = 0;
  // Fixes the input dims (one per input); returns the output dims or an
  // error naming the layer.
  virtual absl::StatusOr<Dims> Configure(const std::vector<Dims>& in) = 0;
  // Trained tensors, in flat order.
  virtual std::vector<ParamSpec> Params() const = 0;
  // Untrained state (running statistics), in flat order.
  virtual std::vector<ParamSpec> State() const { return {}; }
  // params[i] / grads[i] point at the storage of Params()[i].
  virtual absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                            const std::vector<float*>& grads,
                            int max_batch) = 0;
  // state[i] points at the storage of State()[i]; after Bind.
  virtual absl::Status BindState(const std::vector<float*>& state);
  virtual absl::Status Forward(const ForwardPass& pass, int batch,
                               const std::vector<const float*>& x,
                               float* y) = 0;
  // Backward of the last training Forward: writes (overwrites) this layer's
  // parameter gradients and, for each input whose dx[i] is not null, the
  // gradient w.r.t. that input. x and y are Forward's inputs and output.
  virtual absl::Status Backward(int batch, const std::vector<const float*>& x,
                                const float* y, const float* dy,
                                const std::vector<float*>& dx) = 0;

  // Deferred parameter gradients (ModelOptions::defer_weight_gradients): a
  // layer that can compute the gradient with respect to its input apart
  // from its parameter gradients says so here. BackwardInput then writes
  // only dx, as Backward would, and keeps what BackwardParams needs;
  // BackwardParams writes the parameter gradients Backward would have
  // written, bit for bit, provided the layer's inputs and output are still
  // those of the last training Forward.
  virtual bool SplitsBackward() const { return false; }
  virtual absl::Status BackwardInput(int batch,
                                     const std::vector<const float*>& x,
                                     const float* y, const float* dy,
                                     const std::vector<float*>& dx);
  virtual absl::Status BackwardParams();

  // One-input conveniences (a training pass with seed 0).
  absl::StatusOr<Dims> Configure(const Dims& in) {
    return Configure(std::vector<Dims>{in});
  }
  absl::Status Forward(int batch, const float* x, float* y);
  absl::Status Backward(int batch, const float* x, const float* y,
                        const float* dy, float* dx);
};

std::unique_ptr<Layer> NewConv2d(std::string name, int out_channels,
                                 int kernel, int pad, int stride = 1,
                                 bool bias = true);
std::unique_ptr<Layer> NewRelu(std::string name);
// NewConv2d followed by NewRelu as one layer: its parameters are exactly
// NewConv2d's ("<name>.weight", "<name>.bias"), its results those of the pair
// up to float rounding. The forward pass is the backend's Conv2dReluForward
// (on the oneDNN backend, one convolution with the ReLU as its post-op: no
// separate pass over the activations, no pre-activation buffer); the backward
// pass is the ReLU's backward from the fused output, then the convolution's.
std::unique_ptr<Layer> NewConv2dRelu(std::string name, int out_channels,
                                     int kernel, int pad, int stride = 1,
                                     bool bias = true);
// Pools with a square window, stride (0: the window) and zero padding
// (PoolDesc).
std::unique_ptr<Layer> NewMaxPool(std::string name, int window, int stride = 0,
                                  int pad = 0);
std::unique_ptr<Layer> NewAvgPool(std::string name, int window, int stride = 0,
                                  int pad = 0);
// N x C x H x W -> N x C x 1 x 1, the mean over H x W.
std::unique_ptr<Layer> NewGlobalAvgPool(std::string name);
// Flattens C,H,W into a vector (a copy; NCHW memory already is that layout).
std::unique_ptr<Layer> NewFlatten(std::string name);
// Flattens its input (torch.flatten(x, 1)), then x W^T + b.
std::unique_ptr<Layer> NewDense(std::string name, int out_features,
                                bool bias = true);
// PyTorch's BatchNorm2d (BatchNorm1d on N x C x 1 x 1): parameters
// "weight" (ones) and "bias" (zeros), state "running_mean" (zeros) and
// "running_var" (ones).
std::unique_ptr<Layer> NewBatchNorm(std::string name, float eps = 1e-5f,
                                    float momentum = 0.1f);
// Inverted dropout: in training, zeroes each value with probability `rate`
// and scales the rest by 1 / (1 - rate); the identity in evaluation.
std::unique_ptr<Layer> NewDropout(std::string name, float rate);
// Elementwise sum of two or more inputs of one shape.
std::unique_ptr<Layer> NewAdd(std::string name);
// Concatenation of two or more inputs along channels, in input order; their
// H x W must agree.
std::unique_ptr<Layer> NewConcat(std::string name);

// The model-building step that fuses a sequential list: each NewConv2d
// layer directly followed by a NewRelu layer becomes one NewConv2dRelu of
// the convolution's name and configuration. Parameter names and the flat
// parameter layout are unchanged (a Relu has no parameters); the Relu's name
// is dropped. Takes layers not yet given to Model::Create.
std::vector<std::unique_ptr<Layer>> FuseConvRelu(
    std::vector<std::unique_ptr<Layer>> layers);

// A node of a model's graph: its layer and the nodes it reads, by index
// into the node list (each smaller than its own; -1 is the model's input).
struct GraphNode {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;
};

// FuseConvRelu on a graph: a convolution (or a batch norm) whose only
// reader is a ReLU that reads only it becomes one layer with the ReLU fused
// in (NewConv2dRelu; a batch norm running the backend's BatchNormRelu*
// forwards), and the ReLU's readers read it. Parameters are unchanged.
std::vector<GraphNode> FuseConvReluGraph(std::vector<GraphNode> nodes);

struct StepResult {
  // Mean softmax cross-entropy over the batch; against the smoothed target
  // in ComputeGradients when the model has label smoothing (Evaluate's is
  // always the plain cross-entropy).
  float loss = 0;
  int64_t correct = 0;   // Examples whose argmax equals the label.
};

// Hooks a training step calls between its layers, for wait-free
// backpropagation (worker/exchange.h): parameters may still be arriving while
// the forward pass runs, and gradients leave while the backward pass runs.
// An unset hook is not called.
struct StepHooks {
  // Before the forward of a node with parameters, which are the flat range
  // [begin, end): the hook may wait for them and write them
  // (Model::SetParameterRange). Called in the graph's order (which is
  // increasing order of begin unless weight gradients are deferred).
  std::function<absl::Status(int64_t begin, int64_t end)> before_forward;
  // After the backward of a node with parameters: the gradients from flat
  // offset `ready_from` to the end are final for this step
  // (Model::StartGradientCopy reads them). Called with decreasing offsets,
  // the last time with 0. Not called at all when the loss is not finite.
  std::function<absl::Status(int64_t ready_from)> gradients_ready;
};

struct ModelOptions {
  // The parameter gradients of the layers right above the first layer with
  // parameters (those whose gradient reaches it through parameterless
  // layers only, and which split their backward: Layer::SplitsBackward) are
  // computed after the first layer's backward, at the end of the pass, so
  // the first layer's gradient, which the next step's forward needs first,
  // is final that much earlier. Their tensors go first in the flat vector
  // (param_specs(), leading_deferred_tensors()), so gradients still become
  // final as suffixes of it (StepHooks::gradients_ready). The gradients are
  // the same bits either way.
  bool defer_weight_gradients = false;
  // Label smoothing of the training loss, in [0, 1)
  // (Backend::SoftmaxCrossEntropy).
  float label_smoothing = 0.0f;
  // Dropout masks come from (dropout_seed, training step, node).
  uint64_t dropout_seed = 0;
};

class Model {
 public:
  // Takes ownership of the layers; `backend` must outlive the model. Every
  // node but the last must be read by a later one; the last node's output
  // size is the number of classes.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      Backend* backend, std::vector<GraphNode> nodes, Dims input,
      int max_batch, const ModelOptions& options = {});
  // A sequential network: each layer reads the one before it.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      Backend* backend, std::vector<std::unique_ptr<Layer>> layers,
      Dims input, int max_batch, float label_smoothing = 0.0f);
  virtual ~Model() = default;

  // Parameter tensors in flat order, named "<layer>.<suffix>": the layers'
  // in graph order, except that with ModelOptions::defer_weight_gradients
  // the deferred layers' tensors come first.
  virtual const std::vector<TensorSpec>& param_specs() const = 0;
  // How many of param_specs() lead as deferred (0 without deferral).
  virtual int leading_deferred_tensors() const { return 0; }
  // How many tensors the first layer with parameters has.
  virtual int first_layer_tensors() const { return 0; }
  // The indices into param_specs() in the graph's order (the identity
  // without deferral): files list the tensors this way.
  virtual std::vector<int> graph_order() const = 0;
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

  // The untrained state (batch norm's running statistics), flat, named
  // "<layer>.running_mean" / "<layer>.running_var"; empty for most models.
  virtual const std::vector<TensorSpec>& state_specs() const = 0;
  virtual int64_t state_size() const = 0;
  virtual std::vector<float> InitialState() const = 0;
  virtual absl::Status SetState(absl::Span<const float> host) = 0;
  virtual absl::Status GetState(absl::Span<float> host) const = 0;

  // Backend memory of the flat parameters / gradients.
  virtual float* parameters() = 0;
  virtual float* gradients() = 0;

  // A training forward and backward on a batch from host memory: host_x
  // holds batch * input_dims().Size() floats, host_labels batch class
  // indices. Gradients of the mean loss overwrite gradients(); running
  // statistics move by their momentum.
  absl::StatusOr<StepResult> ComputeGradients(const float* host_x,
                                              const int32_t* host_labels,
                                              int batch) {
    return ComputeGradients(host_x, host_labels, batch, StepHooks{});
  }
  // The same, calling `hooks` between layers. With gradients_ready set, the
  // loss is settled before the backward pass, which is skipped (gradients
  // unchanged) when it is not finite.
  virtual absl::StatusOr<StepResult> ComputeGradients(
      const float* host_x, const int32_t* host_labels, int batch,
      const StepHooks& hooks) = 0;
  // Copies host[begin, end) (host: num_parameters() floats) into the same
  // range of the parameter buffer.
  virtual absl::Status SetParameterRange(absl::Span<const float> host,
                                         int64_t begin, int64_t end) = 0;
  // Starts copying gradients [begin, end) into the same range of `host`
  // (num_parameters() floats) without waiting (Backend::CopyToHostAsync):
  // on a GPU the copy runs while the backward pass goes on. `host`'s range must not be read
  // before WaitGradientCopies() has returned, which another thread may
  // call; the next ComputeGradients's device work waits for the copies.
  virtual absl::Status StartGradientCopy(int64_t begin, int64_t end,
                                         absl::Span<float> host) = 0;
  virtual absl::Status WaitGradientCopies() = 0;
  // An evaluation forward (running statistics, no dropout).
  virtual absl::StatusOr<StepResult> Evaluate(const float* host_x,
                                              const int32_t* host_labels,
                                              int batch) = 0;
  // A training forward only, moving the running statistics by `momentum`
  // (1 / (k + 1) for the k-th of K batches leaves their plain mean: the
  // statistics of the current parameters, as torch.optim.swa_utils.update_bn
  // computes them). Parameters and gradients are untouched.
  virtual absl::Status UpdateStatistics(const float* host_x, int batch,
                                        float momentum) = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_MODEL_H_
