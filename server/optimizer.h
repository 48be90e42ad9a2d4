// File: server/optimizer.h
//
// Server-side optimizers. An Optimizer is an immutable rule; the per-parameter
// state it needs (momentum velocity, Adagrad accumulator) lives with each
// chunk in the parameter store, so one Optimizer serves every chunk from any
// thread at once.
//
//   OptimizerOptions o;
//   o.name = "adagrad";
//   o.learning_rate = 0.05f;
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, CreateOptimizer(o));
//   std::vector<float> state(n * opt->StateSize(), opt->InitialState());
//   opt->Apply(n, grad, /*scale=*/1.0f, params, state.data());
#ifndef DOWNPOUR_SERVER_OPTIMIZER_H_
#define DOWNPOUR_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace downpour {

struct OptimizerOptions {
  // "sgd", "momentum" or "adagrad" (DistBelief's choice for Downpour).
  std::string name = "adagrad";
  float learning_rate = 0.05f;
  // Momentum coefficient (momentum only).
  float momentum = 0.9f;
  // Initial Adagrad accumulator value; keeps the first steps bounded
  // (TensorFlow's initial_accumulator_value).
  float adagrad_initial_accumulator = 0.1f;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual const std::string& name() const = 0;
  // Floats of state per parameter element (0 for SGD). The state of element
  // i is state[i * StateSize() .. (i + 1) * StateSize()), interleaved.
  virtual int StateSize() const = 0;
  // Initial value of every state float.
  virtual float InitialState() const = 0;
  // One update of `n` parameters with gradient `grad * scale`; `state` holds
  // n * StateSize() floats. `grad` is n float32 values at any alignment (so
  // a gradient can be applied straight from a received message's bytes).
  // A single vectorizable pass; no allocation. Rules are elementwise: one
  // Apply over n elements equals Applys over consecutive runs of them (with
  // params offset by the run's start and state by start * StateSize()),
  // which the store relies on to apply a gradient piece by piece.
  virtual void Apply(int64_t n, const void* grad, float scale, float* params,
                     float* state) const = 0;
};

// InvalidArgument for an unknown name or a non-positive / non-finite rate.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_OPTIMIZER_H_
