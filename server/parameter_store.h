// File: server/parameter_store.h
//
// One parameter-server shard's state and logic, with no RPC in it: the chunks
// this shard owns (values, version, optimizer state), declaration of the
// model layout, pulls and pushes. The gRPC service (server/grpc_service.h) is
// a thin adapter over it; tests and in-process clients call it directly.
//
// Modes (ParameterStoreOptions::mode):
//  * async (Downpour): each push is applied on arrival. Every chunk has its
//    own lock, so pushes to different chunks never wait on each other.
//    Optionally staleness-aware (the step is divided by the update's
//    staleness, Zhang et al. 2016) and with a drop threshold.
//  * sync: the update for step v is the mean of the gradients computed from
//    step v, summed in worker-index order (deterministic), applied once when
//    `replicas_to_aggregate` of them arrived; gradients from older steps are
//    dropped and counted. Pulls may wait for a step (PullSpec::min_version).
//  * ssp (stale-synchronous parallel): pushes apply on arrival, and a pull by
//    a worker whose clock (pushes done) is c waits until the slowest active
//    worker's clock is >= c - staleness.
// No wait outlives `sync_timeout` (plus one timer tick), whatever the pull
// asks for. After the timeout the workers being waited for are evicted
// (named in the log and the stats) and the job goes on with the rest, or,
// when fewer than `min_replicas` remain, is aborted: every call then fails
// with ABORTED naming the missing workers. Workers are evicted only on
// behalf of one that is ahead of them: in sync mode a worker whose gradient
// for the step is in, in ssp mode an active worker at the pull's clock. A
// pull that no such worker stands behind (on a fresh job nobody has pushed;
// a step or clock nobody reached) evicts nobody: it is answered
// DEADLINE_EXCEEDED naming what it waited for. A pull asking for more than
// 16 steps (sync) or clocks (ssp) beyond the furthest one on the shard is
// InvalidArgument at once.
// A push carries (worker_id, seq) and may be cut into parts (PushId); a part
// already received for that worker and seq, or a part of an older seq, is a
// retry and is acknowledged without being applied, so no update is lost or
// applied twice. Each request is validated completely (known chunks owned by
// this shard, exact sizes, finite values) before anything is changed: a bad
// request changes nothing.
// A large shard may be declared over several Declare calls, each with some
// chunks' initial values; it serves pulls and pushes once all have values.
//
// Usage:
//   ParameterStoreOptions o; o.shard_index = 0; o.num_shards = 2;
//   DP_ASSIGN_OR_RETURN(auto store, ParameterStore::Create(o));
//   DP_ASSIGN_OR_RETURN(bool fresh, store->Declare(layout, initial_chunks));
//   store->Pull({}, [&](const ChunkView& c) { ... });
//   DP_ASSIGN_OR_RETURN(PushResult r, store->Push(worker, seq, grads));
//
// Inside, the store only validates a request, claims a push (at most once,
// server/push_dedup.h) and hands it to the step policy of its mode
// (server/step_policy.h: async_policy, sync_policy, ssp_policy); the values
// live in server/chunk_storage.h and the counters in server/shard_metrics.h.
//
// Thread-safety: all methods may be called concurrently.
#ifndef DOWNPOUR_SERVER_PARAMETER_STORE_H_
#define DOWNPOUR_SERVER_PARAMETER_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/shard_stats.h"
#include "common/sharding.h"
#include "common/train_mode.h"
#include "server/optimizer.h"
#include "server/shard_snapshot.h"
#include "server/store_types.h"

namespace downpour {

// The option and value types (ParameterStoreOptions, PullSpec, ChunkBytes,
// ChunkView, PushId, PushResult) are in server/store_types.h.

class ParameterStore {
 public:
  static absl::StatusOr<std::unique_ptr<ParameterStore>> Create(
      const ParameterStoreOptions& options);
  virtual ~ParameterStore() = default;

  // Declares the layout. `initial` holds initial values for some or all of
  // this shard's chunks (each at most once, full size, finite); each chunk
  // keeps the first values it is given, and the shard serves pulls and pushes
  // once every chunk has values. Returns true only for the call that
  // initialized the shard, i.e. gave the last chunk without values its
  // values (DeclareModelResponse.initialized_now); false for every other
  // call, including earlier parts of a split declaration. The layout is
  // checked against options.layout_limits (common/sharding.h) before
  // anything is built from it: InvalidArgument naming the limit. A layout
  // other than the first one accepted (the message names the first
  // difference), or one cut for another number of shards, is
  // InvalidArgument. A refused call changes nothing: after a refused first
  // layout the shard still takes a valid one.
  virtual absl::StatusOr<bool> Declare(const ModelLayout& layout,
                                       absl::Span<const ChunkBytes> initial) = 0;

  // Calls `sink` once per requested chunk (all owned chunks when `chunk_ids`
  // is empty), in request order, each with values and the matching version.
  // FailedPrecondition before initialization; InvalidArgument for a chunk
  // this shard does not own (nothing is read then).
  absl::Status Pull(absl::Span<const int32_t> chunk_ids,
                    const std::function<void(const ChunkView&)>& sink);

  // Like Pull, but may wait (see PullSpec) without blocking the caller:
  // `sink` and then `done` run exactly once, either now on this thread or
  // later on the thread that made the pull ready (a push, a leave, or the
  // store's timeout thread). `sink` is not called when the status is an
  // error. In sync and ssp mode a pull that waits ends within sync_timeout
  // (plus a tick): with the values, or ABORTED, or DEADLINE_EXCEEDED naming
  // what it waited for; one asking for more than 16 steps or clocks beyond
  // the shard is InvalidArgument at once (see the file comment).
  virtual void PullWhenReady(PullSpec spec,
                             std::function<void(const ChunkView&)> sink,
                             std::function<void(absl::Status)> done) = 0;

  // Applies gradients with the server optimizer (see the file comment).
  // worker_id >= 0 (and < num_workers when num_workers > 0, in every mode),
  // seq >= 1, 0 <= part < num_parts <= the shard's chunks (1 for a shard
  // with none), at least one chunk per part when the shard has any, each
  // chunk at most once per push. In
  // sync mode a push must carry every chunk of the shard: the step's update
  // is the mean of whole gradients. A one-part push missing chunks is
  // InvalidArgument; a push cut into parts carries each chunk in exactly one
  // part, and when its last part arrives without all of them the worker's
  // gradient for the step is refused (InvalidArgument).
  virtual absl::StatusOr<PushResult> Push(const PushId& id,
                                          absl::Span<const ChunkBytes> grads) = 0;
  // A push in one part.
  absl::StatusOr<PushResult> Push(int32_t worker_id, int64_t seq,
                                  absl::Span<const ChunkBytes> grads) {
    return Push(PushId{worker_id, seq, 0, 1}, grads);
  }

  // The worker has finished; sync and ssp stop waiting for it.
  virtual absl::Status Leave(int32_t worker_id) = 0;

  // Answers every waiting pull with CANCELLED and stops waiting from now on
  // (later pulls are served at once). Call before shutting the RPC server
  // down, so no call is left unfinished. Idempotent.
  virtual void Shutdown() = 0;

  virtual ShardStats Stats() const = 0;

  // Snapshots (server/shard_snapshot.h). Save: a snapshot of a declared shard,
  // taken chunk by chunk while pushes go on (each chunk's lock held for one
  // copy of its optimizer state); the dedup table is read after the chunks, so
  // a push in the values is never applied again after a restore (one claimed
  // but not yet in the values may be lost). In sync mode the copy is retried
  // until every chunk is at the same step. FailedPrecondition before the
  // declaration. Restore: on a shard not yet declared, takes the snapshot's
  // layout, values, optimizer state, versions, dedup table and clocks, and
  // serves from then on; FailedPrecondition for another shard, shard count,
  // optimizer or mode, or an already declared shard; InvalidArgument for sizes
  // that do not match the layout, a value that is not finite, a counter
  // beyond kMaxSnapshotCounter or a dedup row larger than the shard allows.
  // Dedup rows of workers at or above num_workers (when given) are dropped.
  virtual absl::StatusOr<ShardSnapshot> Save() const = 0;
  virtual absl::Status Restore(const ShardSnapshot& snapshot) = 0;
  // The snapshot writer reports each write (written at `when`, or failed) for
  // Stats' last_snapshot_unix_s / snapshots_written / snapshots_failed; Restore
  // sets last_snapshot_unix_s itself.
  virtual void RecordSnapshotWrite(bool ok, absl::Time when) = 0;
  // A standby shard that took its primary's state (server/replication.h)
  // adds the primary's push counts to its own, so that Stats continue them.
  virtual void AdoptPushCounts(int64_t applied, int64_t duplicate) = 0;

  // The shard map of the declared layout; FailedPrecondition before.
  virtual absl::StatusOr<ShardMap> shard_map() const = 0;

  // Replaces every chunk's values with `values` (the shard's chunks
  // concatenated in local order, all finite) and bumps each version by one;
  // the optimizer state is kept. Sandblaster mode's shard-side L-BFGS
  // (server/lbfgs_shard.h) writes its point here, so pulls serve it.
  // FailedPrecondition before the declaration; InvalidArgument for a wrong
  // size or a value that is not finite (nothing is written).
  virtual absl::Status Overwrite(absl::Span<const float> values) {
    (void)values;
    return absl::UnimplementedError("this store cannot be overwritten");
  }
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PARAMETER_STORE_H_
