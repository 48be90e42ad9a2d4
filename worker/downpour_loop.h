// File: worker/downpour_loop.h
//
// The Downpour SGD worker loop (Dean et al. 2012, Algorithm
// "DownpourSGDClient") as a class; trainer.h's RunDownpourWorker is the usual
// way in.
//
//   for each minibatch (step = 0, 1, ...):
//     if step % n_fetch == 0: parameters <- Pull()
//     g <- gradient(parameters, minibatch); accrued += g
//     if n_fetch > 1: parameters -= local_lr * g   (the replica's own step)
//     if (step + 1) % n_push == 0: Push(accrued); accrued <- 0
//
// and the accrued remainder is pushed at the end. The pieces live in their
// own units: the replicas' parallel compute and gradient mean in
// replica_group.h, the synchronous or overlapped push/pull in exchange.h, the
// time breakdown in step_timing.h.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(auto loop, DownpourLoop::Create(options, replicas,
//                                                       client, on_progress));
//   DP_ASSIGN_OR_RETURN(TrainResult r, loop->Run());
//
// Thread-safety: Run() is called once, from one thread; on_progress runs on
// that thread. Ownership: the client, models and batchers are borrowed and
// must outlive the loop.
#ifndef DOWNPOUR_WORKER_DOWNPOUR_LOOP_H_
#define DOWNPOUR_WORKER_DOWNPOUR_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/host_allocator.h"
#include "common/train_mode.h"
#include "worker/data_position.h"
#include "worker/exchange.h"
#include "worker/ps_client.h"
#include "worker/replica_group.h"
#include "worker/step_timing.h"

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
  // Push and pull in the background while computing (see exchange.h).
  bool overlap = false;
  // With overlap: wait-free backpropagation where it applies
  // (ExchangeOptions::wait_free).
  bool wait_free = ExchangeOptions{}.wait_free;
  int64_t bucket_bytes = ExchangeOptions{}.bucket_bytes;
  bool early_pulls = ExchangeOptions{}.early_pulls;
  // Wait-free async: ExchangeOptions::fresh_wait_fraction.
  double fresh_wait_fraction = ExchangeOptions{}.fresh_wait_fraction;
  // Host staging for pulled parameters and pushed gradients (pinned memory
  // for a CUDA backend); null means DefaultHostAllocator(). Not owned.
  HostAllocator* host_allocator = nullptr;
  // Graceful stop. When this becomes true the loop
  // finishes the step under way, pushes the accrued gradient and leaves, as
  // at max_steps. Polled once per step; not owned, may be null.
  const std::atomic<bool>* stop_requested = nullptr;
  // Resume the data position (worker/data_position.h).
  // When set, Run() reads the steps a previous process of this worker took,
  // draws and discards that many batches first (no compute, no push; they
  // count towards max_steps and in the step numbers), records the steps
  // whose pushes the servers have acknowledged as each is acknowledged
  // (Exchange::set_on_acknowledged: with overlap, the step before the one
  // computing; never a step whose gradient a kill could still lose, and at
  // most one behind what the servers applied), and removes the file when
  // training reaches its end (not after a graceful stop, which a new
  // process resumes from). A failed write is reported once and training
  // goes on. Not owned, may be null; one loop per file.
  DataPositionFile* position = nullptr;
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

class DownpourLoop {
 public:
  // Checks the options (n_fetch, n_push >= 1; sync needs both 1) and the
  // replicas, and allocates the host staging (ResourceExhausted when the
  // allocator has no memory). `client` must be declared.
  static absl::StatusOr<std::unique_ptr<DownpourLoop>> Create(
      const TrainerOptions& options, absl::Span<const Replica> replicas,
      ParameterClient* client,
      std::function<void(const Progress&)> on_progress);

  // Runs until any batcher is exhausted or max_steps, then leaves the job
  // (Leave). A non-finite loss stops training with an error (nothing is
  // pushed). Call once.
  absl::StatusOr<TrainResult> Run();

 private:
  DownpourLoop(const TrainerOptions& options, ParameterClient* client,
               std::function<void(const Progress&)> on_progress,
               std::unique_ptr<ReplicaGroup> group,
               std::unique_ptr<Exchange> exchange);

  // Skips the batches of the steps options_.position records.
  void Resume();
  // Records `steps` as the position.
  void RecordPosition(int64_t steps);
  // One step: false (and OK) when the input is exhausted.
  absl::StatusOr<bool> Step();
  // The computing part of a step, timed as compute.
  absl::Status Compute();
  // Reports progress at the end of a logging window.
  void MaybeReport();
  // The final push, Leave, and the result's totals; `ended`: training
  // reached its end (not a graceful stop).
  absl::Status Finish(bool ended);

  const TrainerOptions options_;
  ParameterClient* const client_;  // Not owned.
  const std::function<void(const Progress&)> on_progress_;
  std::unique_ptr<ReplicaGroup> group_;
  std::unique_ptr<Exchange> exchange_;  // Uses group_; declared after it.

  TrainResult result_;
  absl::Time begin_;
  Stopwatch clock_;
  ProgressWindow window_;
  bool logged_window_ = false;  // A progress window was reported.
  int epoch_ = 0;
  bool position_write_failed_ = false;  // Reported once.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DOWNPOUR_LOOP_H_
