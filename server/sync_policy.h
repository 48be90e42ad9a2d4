// File: server/sync_policy.h
//
// Synchronous mode: the update for step v is the mean of the gradients the
// workers computed from step v, summed in worker-index order (so the result
// is bit-identical from run to run), applied once when
// `replicas_to_aggregate` (0: all active workers) of them have arrived.
// A gradient from a worker's new incarnation (a restarted worker process)
// replaces what its old process sent for the step, whole or in part.
// Gradients from older steps, a second gradient for a step, and gradients
// still missing parts when the step completes are dropped and counted. A
// pull may wait for a step (PullSpec::min_version), at most sync_timeout
// (join_timeout while a worker has not been heard from, below); a
// min_version more than 16 steps ahead is refused at once. The parts of a
// push together carry every chunk of the shard exactly once (a push missing
// chunks is refused: a step averages whole gradients). Waiting, leaving,
// eviction and abort: server/waiting_policy.h; once a gradient for the step
// has waited sync_timeout for the others, the missing workers are evicted
// and the step completes with the gradients already in if at least
// min_replicas are (a worker not heard from yet is waited for up to
// join_timeout: see "Late joiners" in server/waiting_policy.h). A pull for
// a step nobody has pushed for evicts nobody: it ends DEADLINE_EXCEEDED
// when its wait is over.
//
// Snapshots and restore. The step survives a snapshot, the step's partial
// gradients do not. A shard restored from a snapshot resumes at the workers'
// step, it does not redo steps: until the first step completes after the
// restore, a request showing that the workers are past the shard's step moves
// the shard there, values unchanged, dropping (and counting) the gradients
// pending for the old step:
//  * a push computed from a later step: to that step;
//  * a pull waiting for step v > step + 1: to v;
//  * a pull waiting for step + 1 from a worker (PullSpec::worker_id) whose
//    whole gradient for this step is not here: to step + 1. That worker
//    pushed before it pulled, so its gradient (or some of its parts) went
//    to the previous process and died with it; the step could only complete
//    without it, after sync_timeout, so it is lost for everyone at once.
//    A pull that came with the worker's last push part (PullSpec::
//    with_push) does not move the shard: it is answered at once, below
//    its min_version, and the worker sends its other parts again first.
// So when a shard dies in step T after some workers' gradients for T were
// acknowledged, step T is lost for all workers, whichever request reaches
// the restored shard first; when none was, the workers' retries complete T.
// Nobody waits for a gradient the crash took. A pull without a worker id
// (-1) for step + 1 waits as usual.
//
// Thread-safety: see server/step_policy.h. The step's gradients are held
// under the policy's lock; completing a step takes each chunk's lock in
// turn.
#ifndef DOWNPOUR_SERVER_SYNC_POLICY_H_
#define DOWNPOUR_SERVER_SYNC_POLICY_H_

#include <memory>

#include "server/step_policy.h"

namespace downpour {

// ctx.options must satisfy ValidateWaitingOptions (server/waiting_policy.h).
std::unique_ptr<StepPolicy> NewSyncPolicy(StepContext ctx);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SYNC_POLICY_H_
