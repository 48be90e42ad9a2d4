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
//   opt->ApplyAt(/*t=*/chunk_updates + 1, n, grad, 1.0f, params, state.data());
//
// Adam keeps m and v interleaved per element (StateSize() == 2); its step
// count is the update number t the caller passes (the chunk's version), so
// it needs no per-chunk state of its own.
#ifndef DOWNPOUR_SERVER_OPTIMIZER_H_
#define DOWNPOUR_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

// The learning rate as a function of the update number t = 1, 2, ... (a chunk's
// update count including the update being applied: every chunk of a shard
// counts its own, and the count is the chunk's version, which snapshots already
// keep). Linear warm-up from lr / warmup to lr over the first `warmup_updates`,
// then `decay`:
//   "none":   lr;
//   "cosine": lr * (min + (1 - min) * (1 + cos(pi * p)) / 2), p the share of
//             [warmup_updates, decay_updates) done (1 beyond it);
//   "step":   lr * step_gamma ^ floor((t - warmup_updates) / step_every).
struct LrSchedule {
  std::string decay = "none";
  int64_t warmup_updates = 0;
  int64_t decay_updates = 0;  // cosine: where the rate reaches min.
  float min_factor = 0.0f;    // cosine: the final rate over lr.
  int64_t step_every = 0;     // step: updates between decays.
  float step_gamma = 0.1f;    // step: factor per decay.
};

// The schedule's multiplier of the learning rate at update t (>= 1).
float LrFactor(const LrSchedule& schedule, int64_t t);
// InvalidArgument naming the bad field.
absl::Status ValidateLrSchedule(const LrSchedule& schedule);

// How the rate is scaled for the number of workers (Goyal et al. 2017 for
// sync; lr / W or lr / sqrt(W) for async, where W workers each apply their
// own updates): "none", "linear" or "sqrt".
//   aggregated = true  (sync: each update is the mean of k gradients):
//       lr * k, or lr * sqrt(k);
//   aggregated = false (async, ssp): lr / W, or lr / sqrt(W).
absl::StatusOr<float> ScaleLearningRate(float lr, const std::string& scaling,
                                        bool aggregated, int workers);

struct OptimizerOptions {
  // "sgd", "momentum", "adagrad" (DistBelief's choice for Downpour) or
  // "adam".
  std::string name = "adagrad";
  float learning_rate = 0.05f;
  // Momentum coefficient (momentum only).
  float momentum = 0.9f;
  // Initial Adagrad accumulator value; keeps the first steps bounded
  // (TensorFlow's initial_accumulator_value).
  float adagrad_initial_accumulator = 0.1f;
  // Kept last so that aggregate initializers of the fields above stay valid.
  LrSchedule schedule;
  // Adam's moment decays and epsilon (adam only).
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_epsilon = 1e-8f;
  // Decoupled weight decay (adam only: AdamW, Loshchilov & Hutter 2019):
  // each update first shrinks every parameter by lr_t * weight_decay, lr_t
  // the scheduled rate without Adam's bias correction (PyTorch's AdamW).
  float weight_decay = 0.0f;
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
  // One update of `n` parameters with gradient `grad * scale` as update
  // number t (>= 1; see LrSchedule): the schedule's rate at t, and Adam's
  // bias correction for t. `state` holds
  // n * StateSize() floats. `grad` is n float32 values at any alignment (so
  // a gradient can be applied straight from a received message's bytes, or
  // a worker's shared memory); a non-finite one counts as 0. The store
  // refuses a push with one, so only a value changed after that check (a
  // worker writing its shared memory during the call) or a sync step's sum
  // that overflowed is read so: no NaN or Inf from a gradient enters the
  // arithmetic (a huge finite one still can overflow the state).
  // A single vectorizable pass; no allocation. Rules are elementwise: one
  // Apply over n elements equals Applys over consecutive runs of them (with
  // params offset by the run's start and state by start * StateSize()),
  // which the store relies on to apply a gradient piece by piece.
  virtual void ApplyAt(int64_t t, int64_t n, const void* grad, float scale,
                       float* params, float* state) const = 0;
  // ApplyAt(1, ...): for callers without an update count.
  void Apply(int64_t n, const void* grad, float scale, float* params,
             float* state) const {
    ApplyAt(1, n, grad, scale, params, state);
  }
};

// InvalidArgument for an unknown name, a non-positive / non-finite rate or a
// bad schedule.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_OPTIMIZER_H_
