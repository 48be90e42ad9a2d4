// File: server/step_policy.h
//
// What a training mode decides in a parameter-server shard: when a validated
// and claimed push is applied (on arrival, or as part of a step's mean), when
// a pull may be answered, what a worker leaving or falling silent changes,
// and the mode's own figures in the stats. The store (server/parameter_store.h)
// validates requests, claims pushes (server/push_dedup.h) and then calls the
// policy chosen once from ParameterStoreOptions::mode by CreateStepPolicy
// (server/step_policies.h); it never branches on the mode itself.
//
// Implementations: AsyncPolicy (server/async_policy.h), SyncPolicy
// (server/sync_policy.h), SspPolicy (server/ssp_policy.h); the latter two
// share the waiting and eviction machinery of WaitingPolicy
// (server/waiting_policy.h).
//
// Thread-safety: every method may be called concurrently, and OnTick from
// the store's timer thread. Callbacks of a pull (sink, done) run on the
// calling thread or, for a pull that waited, on the thread that made it
// ready; never under a lock of the policy.
#ifndef DOWNPOUR_SERVER_STEP_POLICY_H_
#define DOWNPOUR_SERVER_STEP_POLICY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/shard_stats.h"
#include "server/chunk_storage.h"
#include "server/optimizer.h"
#include "server/push_dedup.h"
#include "server/shard_metrics.h"
#include "server/store_types.h"

namespace downpour {

// What a policy works on, all owned by the store, which outlives the policy.
struct StepContext {
  const ParameterStoreOptions* options = nullptr;  // Not owned.
  const Optimizer* optimizer = nullptr;            // Not owned.
  // The shard's chunks; filled in before the first push can reach the
  // policy (pushes need a fully declared store). Not owned.
  const ShardChunks* chunks = nullptr;
  ShardMetrics* metrics = nullptr;  // Not owned.
  // Validates a pull's chunk ids and reads them into the sink; counts the
  // pull. Called without any lock of the policy held.
  std::function<absl::Status(const PullSpec&, const PullSink&)> read;
  // Where eviction, return and abort messages go. Never called under a lock
  // of the policy.
  std::function<void(const std::string&)> log;
};

class StepPolicy {
 public:
  virtual ~StepPolicy() = default;

  // The mode's checks of a push, before its chunks are validated and before
  // it is claimed: `num_chunks` is the number of chunks in this part. An
  // error is returned to the caller as is (the policy counts it).
  virtual absl::Status CheckPush(const PushId& id, size_t num_chunks) = 0;

  // Takes in one validated, claimed push part. `completes_push`: the store
  // claimed the last missing part of the worker's seq with this one. The
  // parts of a push may come here concurrently and in another order than
  // they were claimed, so a policy that acts once a push is whole (sync's
  // step, ssp's clock) counts the parts it has applied itself. Counts what
  // it applies and drops.
  virtual absl::StatusOr<PushResult> Apply(const PushId& id,
                                           absl::Span<const ChunkBytes> grads,
                                           bool completes_push) = 0;

  // Answers the pull exactly once (see ParameterStore::PullWhenReady): now,
  // through StepContext::read, or later when the mode lets it.
  virtual void PullWhenReady(PullSpec spec, PullSink sink, PullDone done) = 0;

  // The worker (id >= 0, checked by the store) has finished.
  virtual absl::Status Leave(int32_t worker_id) = 0;

  // How often the store's timer thread calls OnTick; zero: no timer.
  virtual absl::Duration TickInterval() const = 0;
  virtual void OnTick() = 0;

  // Answers every waiting pull with CANCELLED; later pulls are served at
  // once and OnTick does nothing. Idempotent.
  virtual void Shutdown() = 0;

  // Sets the mode's fields of the stats: steps, ssp_max_lead,
  // evicted_workers, aborted.
  virtual void FillStats(ShardStats* s) const = 0;

  // What the mode keeps across a snapshot (server/shard_snapshot.h). The
  // defaults are async's and ssp's: any copy, the total of the updates, no
  // counters, every claim.

  // Whether chunk versions, copied one chunk after another while pushes go
  // on, make a snapshot of the mode; false: the store copies again. Sync
  // needs every chunk at one step.
  virtual bool IsSnapshotConsistent(absl::Span<const int64_t> versions) const {
    (void)versions;
    return true;
  }
  // The snapshot's step from its chunks' versions: sync the step they
  // share, the other modes the total of the chunks' updates.
  virtual int64_t SnapshotStep(absl::Span<const int64_t> versions) const {
    int64_t total = 0;
    for (const int64_t v : versions) total += v;
    return total;
  }
  // The mode's counters and their restore: ssp each worker's clock, sync
  // {step}, async none.
  virtual std::vector<int64_t> SaveClocks() const { return {}; }
  virtual absl::Status RestoreClocks(const std::vector<int64_t>& clocks) {
    (void)clocks;
    return absl::OkStatus();
  }
  // The claimed pushes (server/push_dedup.h) a restored shard keeps of
  // those in the snapshot (called once, before RestoreClocks). Sync forgets
  // the claims of its step, whose partial sum is not in a snapshot; ssp
  // notes the parts of a push that are in.
  virtual std::vector<DedupEntry> RestoredClaims(
      std::vector<DedupEntry> saved) {
    return saved;
  }
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STEP_POLICY_H_
