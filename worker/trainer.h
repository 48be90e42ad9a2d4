// File: worker/trainer.h
//
// The worker's entry points: declaring the model on the servers, running the
// Downpour SGD loop (downpour_loop.h) over one or more replicas, and
// evaluating a model on a test set.
//
// Several replicas (one per GPU of a host, say) may act as one worker: each
// computes a gradient on its own batches from the same parameters, in
// parallel, and the worker pushes their mean once (replica_group.h).
//
// With `overlap`, pushing step t's gradient and pulling the next parameters
// run on a background thread while the replicas compute step t+1. In async
// and ssp mode the replicas then compute from the newest parameters that have
// arrived (one step older than without overlap); in sync mode they wait for
// the step's parameters, so results are identical to no overlap
// (exchange.h).
//
// The loop sees the servers only through ParameterClient, the maths only
// through Model/Backend, and the data only through Batcher; it measures where
// each step's time goes (waiting for data, compute, pull, push;
// step_timing.h).
//
// Usage:
//   DP_RETURN_IF_ERROR(DeclareModel(client, *model, seed, shards, chunk));
//   DP_ASSIGN_OR_RETURN(TrainResult r, RunDownpourWorker(options, model,
//                                          client, batcher, on_progress));
//
// Thread-safety: each call runs on the calling thread (the loop starts and
// joins its own helper threads).
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
#include "worker/downpour_loop.h"
#include "worker/replica_group.h"
#include "worker/step_timing.h"
#include "worker/nn/model.h"
#include "worker/ps_client.h"

namespace downpour {

// Declares the model's layout on the servers, initialized with `initial`
// (num_parameters() values) or, when it is null, from `seed`; a model that
// defers weight gradients pins them and the first layer apart
// (ModelLayout::pinned_blocks). The first
// declaration of a job sets the servers' values; later ones only check the
// layout.
absl::Status DeclareModel(ParameterClient* client, const Model& model,
                          uint64_t seed, int num_shards,
                          int64_t max_chunk_bytes,
                          const std::vector<float>* initial = nullptr);

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
