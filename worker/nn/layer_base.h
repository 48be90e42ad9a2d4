// File: worker/nn/layer_base.h
//
// The bookkeeping the layer implementations (layers.cc, layers_graph.cc)
// share: name, configured input dims, bound backend, argument checks, and
// the one-input form most layers have. Internal to worker/nn.
#ifndef DOWNPOUR_WORKER_NN_LAYER_BASE_H_
#define DOWNPOUR_WORKER_NN_LAYER_BASE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"

namespace downpour {

// InvalidArgument naming the layer unless every dim is >= 1.
absl::Status CheckDims(const std::string& name, const Dims& in);

// A layer's own buffer of n floats, allocated on first use (so that a
// forward-only model does without the buffers of the backward pass).
absl::Status EnsureBuffer(Backend* backend, int64_t n, DeviceBuffer* buffer);

// The backward of a ReLU fused into a layer: dy masked by y > 0 (n floats),
// written into *mask (`capacity` floats, allocated by EnsureBuffer; the last
// step's mask is discarded first). Returns mask's data. The mask takes the
// place of the pre-activation buffer the fusion saves.
absl::StatusOr<const float*> FusedReluGradient(Backend* backend,
                                               int64_t capacity, int64_t n,
                                               const float* y, const float* dy,
                                               DeviceBuffer* mask);

// `layer` with a following ReLU fused in, when it is an unfused batch norm
// (NewBatchNorm); else null. For FuseConvReluGraph (layers_graph.cc).
std::unique_ptr<Layer> FusedBatchNormRelu(const Layer* layer);

class LayerBase : public Layer {
 public:
  explicit LayerBase(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

 protected:
  // Checks that Bind got exactly Params().size() non-null views.
  absl::Status BindCommon(Backend* backend, const std::vector<float*>& params,
                          const std::vector<float*>& grads, int max_batch);
  // FailedPrecondition before Bind; InvalidArgument for a batch outside
  // [1, max_batch].
  absl::Status CheckRun(int batch) const;
  // InvalidArgument unless `x` has `n` non-null pointers (and `dx`, when
  // given, n entries).
  absl::Status CheckArity(size_t n, const std::vector<const float*>& x,
                          const std::vector<float*>* dx) const;

  std::string name_;
  Dims in_;
  bool configured_ = false;
  Backend* backend_ = nullptr;  // Not owned.
  int max_batch_ = 0;
};

// A layer of one input: implements the graph interface through
// ConfigureOne / ForwardOne / BackwardOne.
class UnaryLayer : public LayerBase {
 public:
  using LayerBase::LayerBase;
  using Layer::Backward;
  using Layer::Configure;
  using Layer::Forward;

  absl::StatusOr<Dims> Configure(const std::vector<Dims>& in) final;
  absl::Status Forward(const ForwardPass& pass, int batch,
                       const std::vector<const float*>& x, float* y) final;
  absl::Status Backward(int batch, const std::vector<const float*>& x,
                        const float* y, const float* dy,
                        const std::vector<float*>& dx) final;

 protected:
  // `in` already passed CheckDims; sets in_ and configured_ on success.
  virtual absl::StatusOr<Dims> ConfigureOne(const Dims& in) = 0;
  // Called after CheckRun.
  virtual absl::Status ForwardOne(const ForwardPass& pass, int batch,
                                  const float* x, float* y) = 0;
  // dx may be null (the input needs no gradient).
  virtual absl::Status BackwardOne(int batch, const float* x, const float* y,
                                   const float* dy, float* dx) = 0;
};

// A one-input layer without parameters: binds only the backend.
class ParameterlessLayer : public UnaryLayer {
 public:
  using UnaryLayer::UnaryLayer;
  std::vector<ParamSpec> Params() const override { return {}; }
  absl::Status Bind(Backend* backend, const std::vector<float*>& params,
                    const std::vector<float*>& grads, int max_batch) override {
    return BindCommon(backend, params, grads, max_batch);
  }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_LAYER_BASE_H_
