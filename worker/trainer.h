// File: worker/trainer.h
//
// The Downpour SGD worker loop (Dean et al. 2012, Algorithm "DownpourSGDClient"):
//
//   for each minibatch (step = 0, 1, ...):
//     if step % n_fetch == 0: parameters <- Pull()
//     g <- gradient(parameters, minibatch); accrued += g
//     if n_fetch > 1: parameters -= local_lr * g   (the replica's own step)
//     if (step + 1) % n_push == 0: Push(accrued); accrued <- 0
//
// and the accrued remainder is pushed at the end.
//
// Several replicas (one per GPU of a host, say) may act as one worker: each
// computes a gradient on its own batches from the same parameters, in
// parallel, and the worker pushes their mean once (BytePS-style local
// aggregation; the sum runs on the host over the gradients each replica
// copies out for the push anyway).
//
// With `overlap`, pushing step t's gradient and pulling the next parameters
// run on a background thread while the replicas compute step t+1. In async
// and ssp mode the replicas then compute from the newest parameters that have
// arrived (one step older than without overlap); in sync mode they wait for
// the step's parameters, so results are identical to no overlap.
//
// The loop sees the servers
// only through ParameterClient, the maths only through Model/Backend, and the
// data only through Batcher; it measures where each step's time goes (waiting
// for data, compute, pull, push).
#ifndef DOWNPOUR_WORKER_TRAINER_H_
#define DOWNPOUR_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/host_allocator.h"
#include "common/train_mode.h"
#include "worker/data/data.h"
#include "worker/nn/model.h"
#include "worker/ps_client.h"

namespace downpour {

struct TrainerOptions {
  // How the worker waits for the others (the servers must run the same mode):
  // async never waits; sync's pull for step v+1 waits until the servers
  // completed step v; ssp's pull waits while this worker is > staleness
  // clocks ahead.
  TrainMode mode = TrainMode::kAsync;
  // Pull fresh parameters every n_fetch steps; push every n_push steps.
  int n_fetch = 1;
  int n_push = 1;
  // Learning rate of the replica's local step between fetches (used only
  // when n_fetch > 1; 0 keeps the fetched parameters unchanged).
  float local_lr = 0.0f;
  // Progress callback every log_every steps (0: never).
  int log_every = 50;
  // Stop after this many steps (0: when the batcher is exhausted).
  int64_t max_steps = 0;
  // Testing only: extra time per step, counted as compute (a straggler).
  absl::Duration debug_step_delay = absl::ZeroDuration();
  // Push and pull in the background while computing (see above).
  bool overlap = false;
  // Host staging for pulled parameters and pushed gradients (pinned memory
  // for a CUDA backend); null means DefaultHostAllocator(). Not owned.
  HostAllocator* host_allocator = nullptr;
};

// One model replica and its input.
struct Replica {
  Model* model = nullptr;      // Not owned.
  Batcher* batcher = nullptr;  // Not owned.
};

// Seconds spent in each phase.
struct PhaseTimes {
  double data = 0, compute = 0, pull = 0, push = 0;
  double Total() const { return data + compute + pull + push; }
  PhaseTimes& operator+=(const PhaseTimes& o) {
    data += o.data;
    compute += o.compute;
    pull += o.pull;
    push += o.push;
    return *this;
  }
  // e.g. "[data 1% compute 80% pull 10% push 9%]".
  std::string Shares() const;
  // "input-bound", "communication-bound" or "compute-bound".
  std::string Verdict() const;
};

struct Progress {
  int64_t step = 0;  // Steps completed.
  int epoch = 0;
  float loss = 0;    // Mean training loss over the window.
  double examples_per_sec = 0;
  double sec_per_batch = 0;
  PhaseTimes window;  // Time per phase in the window.
};

struct TrainResult {
  int64_t steps = 0;
  int64_t examples = 0;
  int64_t pushes = 0;
  // Mean training loss over the last logging window (or the whole run if
  // shorter).
  float final_loss = 0;
  double seconds = 0;
  PhaseTimes total;
};

// Declares the model's layout on the servers, initialized from `seed`.
absl::Status DeclareModel(ParameterClient* client, const Model& model,
                          uint64_t seed, int num_shards,
                          int64_t max_chunk_bytes);

// Runs the loop until the batcher is exhausted or max_steps, then leaves the
// job (Leave). `client` must be declared. Sync mode needs n_fetch = n_push = 1.
// Non-finite loss stops training with an error (nothing is pushed).
absl::StatusOr<TrainResult> RunDownpourWorker(
    const TrainerOptions& options, Model* model, ParameterClient* client,
    Batcher* batcher, const std::function<void(const Progress&)>& on_progress);

// The same with one or more replicas acting as one worker (all models of the
// same architecture). Stops when any replica's batcher is exhausted.
absl::StatusOr<TrainResult> RunDownpourWorker(
    const TrainerOptions& options, absl::Span<const Replica> replicas,
    ParameterClient* client,
    const std::function<void(const Progress&)>& on_progress);

struct EvalResult {
  int64_t examples = 0;
  double accuracy = 0;
  double loss = 0;
};

// Test-set accuracy and mean loss of the model's current parameters.
absl::StatusOr<EvalResult> EvaluateModel(Model* model, const Dataset& data);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_TRAINER_H_
