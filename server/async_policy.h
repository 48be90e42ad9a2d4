// File: server/async_policy.h
//
// Downpour's asynchronous mode: every push is applied on arrival, chunk by
// chunk under each chunk's own lock (pushes to different chunks never wait
// on each other), optionally scaled by the update's staleness (Zhang et al.
// 2016) or dropped above a staleness threshold. Pulls never wait; Leave and
// the timer do nothing. With num_workers > 0, pushes and leaves from a
// worker_id at or above it are refused (InvalidArgument); with 0 any id >= 0
// is taken.
//
// ApplyOnArrival is the apply step itself, shared with the ssp mode.
//
// Thread-safety: see server/step_policy.h.
#ifndef DOWNPOUR_SERVER_ASYNC_POLICY_H_
#define DOWNPOUR_SERVER_ASYNC_POLICY_H_

#include <memory>

#include "server/step_policy.h"

namespace downpour {

// Applies each of `grads` (validated) to its chunk on arrival under `rule`,
// recording each applied update's staleness in ctx.metrics and the version
// after it in result->versions; sets result->dropped (and counts one drop)
// when the rule dropped any chunk's update.
void ApplyOnArrival(const StepContext& ctx, const StalenessRule& rule,
                    absl::Span<const ChunkBytes> grads, PushResult* result);

std::unique_ptr<StepPolicy> NewAsyncPolicy(StepContext ctx);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_ASYNC_POLICY_H_
