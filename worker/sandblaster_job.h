// File: worker/sandblaster_job.h
//
// A worker's part of a --mode=sandblaster job (Dean et al. 2012, Sandblaster
// L-BFGS); worker/worker_job.h's Train calls RunSandblaster instead of the
// Downpour loop. Every worker holds the whole training set in one shared
// order (a permutation from --seed), asks the coordinator for work
// (worker/sandblaster_portions.h), and for a portion (examples
// [first, first + n) of that order) pulls the parameters once per
// evaluation, computes the portion's summed loss and gradient in batches of
// `compute_batch`, reports the loss, and adds the gradient to its
// accumulation only when its result is the one used. Asked to push, it sends
// the accumulation to the shards once (SandblasterShards::Accumulate); a
// shard's ABORTED (that evaluation is over there: the job went on without
// this worker) drops the accumulation, as a `discard` does.
// Between batches it asks whether the evaluation is still open, so that a
// backup copy another worker finished first is dropped at once.
//
// The chief (worker 0) also runs the coordinator: the portion table served
// over gRPC (registered on the shards, where the other workers find it) and
// the L-BFGS driver (worker/sandblaster_lbfgs.h) on its own thread, whose
// objective is an evaluation through the portions followed by a gather of
// the pushed gradients on the shards. The driver begins once every worker
// has asked for work (or after coordinator_wait, with those that have), so
// that the first evaluations are shared among the whole job. The job ends
// when the evaluations processed epochs x the training set's examples; x is
// then what the servers serve.
//
// Thread-compatible: one call per process; the chief starts and joins the
// driver thread.
#ifndef DOWNPOUR_WORKER_SANDBLASTER_JOB_H_
#define DOWNPOUR_WORKER_SANDBLASTER_JOB_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sandblaster_flags.h"
#include "rpc/credentials.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"
#include "worker/ps_client.h"

namespace downpour {

struct SandblasterJobOptions {
  int32_t worker_id = 0;
  int32_t num_workers = 1;
  SandblasterOptions sandblaster;
  int epochs = 1;
  uint64_t seed = 1;
  int compute_batch = 64;  // At most the model's max_batch.
  std::vector<std::string> ps_hosts;
  TransportSecurityOptions security;
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Where the chief's coordinator listens ("host:port"; port 0: any).
  std::string coordinator_listen = "127.0.0.1:0";
  // How long a worker waits for the chief's coordinator to register, and
  // the chief for every worker to ask for work before the first
  // evaluation (it starts with those that did).
  absl::Duration coordinator_wait = absl::Seconds(120);
  // How long a worker waits for a coordinator that stopped answering
  // before it gives up.
  absl::Duration coordinator_patience = absl::Seconds(10);
  // A worker that holds used results and has not pushed this long after
  // the evaluation's last result is given up on (its portions reissued).
  absl::Duration push_timeout = absl::Seconds(5);
  // Testing only: extra time per compute batch (a straggler).
  absl::Duration debug_step_delay = absl::ZeroDuration();
  // Graceful stop (polled between batches); not owned, may be null.
  const std::atomic<bool>* stop_requested = nullptr;
  // Progress lines ("worker k: ..."); may be null.
  std::function<void(const std::string&)> log;
};

struct SandblasterJobResult {
  int64_t portions = 0;          // Computed and used.
  int64_t backup_portions = 0;   // Computed, lost the race (or dropped).
  int64_t batches = 0;           // Compute batches run.
  int64_t examples = 0;          // Examples of the used portions.
  double seconds = 0;
  double final_loss = 0;         // The chief's last objective value.
  // The chief only (-1 elsewhere).
  int64_t iterations = -1;
  int64_t line_search_evaluations = -1;
  int64_t evaluations = -1;
};

// Runs this worker's part until the coordinator says the job is done.
// `model` computes the gradients; `client` (declared) pulls the parameters;
// `train` is the whole training split.
absl::StatusOr<SandblasterJobResult> RunSandblaster(
    const SandblasterJobOptions& options, Model* model,
    ParameterClient* client, const Dataset& train);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SANDBLASTER_JOB_H_
