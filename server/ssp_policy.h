// File: server/ssp_policy.h
//
// Stale-synchronous parallel mode: pushes are applied on arrival (as in
// async mode, server/async_policy.h), a push advances its worker's clock by
// one once all its parts are applied, and a pull by a worker whose clock is
// c (PullSpec::worker_clock) waits until the slowest active worker's clock
// is >= c - staleness. The largest lead a pull was answered at is reported as
// ShardStats::ssp_max_lead. Waiting, leaving, eviction and abort:
// server/waiting_policy.h; after a timeout the workers holding back a
// waiting pull are evicted if an active worker is at the pull's clock (the
// puller's pushes are in before it pulls); a pull no active worker stands
// behind evicts nobody and ends DEADLINE_EXCEEDED. A worker_clock more than
// 16 beyond the furthest clock on the shard is refused at once.
//
// Thread-safety: see server/step_policy.h. Updates are applied under each
// chunk's lock only; the clocks are under the policy's lock.
#ifndef DOWNPOUR_SERVER_SSP_POLICY_H_
#define DOWNPOUR_SERVER_SSP_POLICY_H_

#include <memory>

#include "server/step_policy.h"

namespace downpour {

// ctx.options must satisfy ValidateWaitingOptions (server/waiting_policy.h).
std::unique_ptr<StepPolicy> NewSspPolicy(StepContext ctx);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SSP_POLICY_H_
