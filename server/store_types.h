// File: server/store_types.h
//
// The plain value types of the parameter store's API (server/parameter_store.h)
// that its parts share: the store's options, what a pull asks for and sees,
// the bytes of a pushed or declared chunk, and a push's identity and result.
// They live apart from the store so that the chunk storage, the dedup table
// and the step policies can use them without depending on the store itself.
//
// Thread-safety: plain structs; no internal synchronization. Ownership is
// stated per field (ChunkBytes borrows its bytes, ChunkView may share them).
#ifndef DOWNPOUR_SERVER_STORE_TYPES_H_
#define DOWNPOUR_SERVER_STORE_TYPES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/sharding.h"
#include "common/train_mode.h"
#include "server/optimizer.h"

namespace downpour {

struct ParameterStoreOptions {
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  OptimizerOptions optimizer;
  TrainMode mode = TrainMode::kAsync;
  // Workers in the job (ids 0..num_workers-1); required for sync and ssp.
  // In async mode 0 takes any worker_id >= 0; > 0 refuses ids at or above it.
  int32_t num_workers = 0;
  // Sync: gradients per step; 0 means all active workers. k < W gives backup
  // workers: the stragglers' gradients for a finished step are dropped.
  int32_t replicas_to_aggregate = 0;
  // Ssp: how many clocks a worker may run ahead of the slowest one.
  int32_t staleness = 0;
  // Async: scale each update by 1 / max(1, staleness).
  bool staleness_aware = false;
  // Async: drop updates whose staleness exceeds this (0: never drop).
  int64_t drop_stale_threshold = 0;
  // Sync/ssp: longest wait for missing workers before evicting them, and
  // the longest any pull waits.
  absl::Duration sync_timeout = absl::Seconds(30);
  // Sync/ssp: the same for a worker that has not pushed to this shard
  // process yet (its process may still be starting); the waits it holds up
  // last this long. At most sync_timeout (the default, zero) gives no
  // grace. ps_server sets 10 x sync_timeout. A restored shard has heard
  // from every worker.
  absl::Duration join_timeout = absl::ZeroDuration();
  // Sync/ssp: fewest workers the job may go on with.
  int32_t min_replicas = 1;
  // Where eviction and abort messages go (stderr when unset).
  std::function<void(const std::string&)> log;
  // Bounds on a declared layout (tensors, rank, elements, chunks, shards,
  // max_chunk_bytes), checked before anything is built from it; see
  // common/sharding.h for the defaults and why.
  LayoutLimits layout_limits;
};

// What a pull waits for; the default waits for nothing.
struct PullSpec {
  // Chunks to read; empty means all owned chunks.
  std::vector<int32_t> chunk_ids;
  // Sync: wait until the step is >= min_version (at most sync_timeout; more
  // than 16 steps ahead of the shard is refused).
  int64_t min_version = 0;
  // Ssp: the pulling worker's clock; negative means do not wait (at most
  // sync_timeout; more than 16 beyond the furthest clock is refused).
  int64_t worker_clock = -1;
  // The largest response the transport can send (0: no limit), counting
  // value_bytes per value (4 for float32, 2 for fp16/bf16) and
  // kPullChunkOverheadBytes per chunk, repeats included. A larger pull is
  // refused with RESOURCE_EXHAUSTED before anything is read or counted in
  // bytes_pulled (rejected["too_large"]).
  int64_t max_response_bytes = 0;
  int value_bytes = 4;
  // Sync: the pulling worker (PullRequest.worker_id); -1 unknown. A shard just
  // restored from a snapshot tells by it whether the worker's gradient for the
  // step it waits on reached this process (server/sync_policy.h).
  int32_t worker_id = -1;
  // Sync: the pull came with the worker's last push part (a PushPull with
  // pull_min_version). On a shard just restored, when the worker's whole
  // gradient for the step is not here, it is answered at once with the
  // values as they are (versions below min_version) instead of moving the
  // shard on: the worker sends again the parts the previous process
  // acknowledged (worker/shard_incarnations.h), then pulls.
  bool with_push = false;
};

// An upper bound on a chunk's header in a PullResponse (rpc/wire.h: tags,
// chunk_id, version, encoding, lengths), for PullSpec::max_response_bytes.
inline constexpr int64_t kPullChunkOverheadBytes = 32;

// Raw little-endian float32 bytes of one chunk, as they arrive off the wire:
// `data` (contiguous), or, when `pieces` is not empty, the concatenation of
// `pieces` (the slices a message arrived in, used without gathering them; a
// value may straddle two pieces). Nothing needs to be aligned. num_bytes is
// the total either way. The bytes are borrowed, not owned.
struct ChunkBytes {
  int32_t chunk_id = 0;
  // For pushes: the version the gradient was computed from.
  int64_t base_version = 0;
  const void* data = nullptr;
  int64_t num_bytes = 0;
  absl::Span<const absl::string_view> pieces;
};

// What a pull sink sees. The callback runs under the chunk's lock: do nothing
// slow in it. `data` stays valid and unchanged for as long as a copy of
// `owner` is kept (the store never writes to values a reader holds; a push
// meanwhile writes a new buffer), so a sink may keep `owner` and read or send
// the values after the callback, without copying them.
struct ChunkView {
  int32_t chunk_id = 0;
  int64_t version = 0;
  const float* data = nullptr;
  int64_t num_elements = 0;
  std::shared_ptr<const void> owner;
};

// A pull's per-chunk callback and its completion callback.
using PullSink = std::function<void(const ChunkView&)>;
using PullDone = std::function<void(absl::Status)>;

// Which push a request belongs to. A push (seq) may be cut into num_parts
// requests, each with some of the chunks; in sync and ssp mode it counts as
// the worker's push once every part arrived.
struct PushId {
  int32_t worker_id = 0;
  int64_t seq = 0;
  int32_t part = 0;
  int32_t num_parts = 1;
  // The worker process's incarnation (PushRequest.incarnation); seq counts
  // within it (server/push_dedup.h).
  uint64_t incarnation = 0;
};

struct PushResult {
  bool duplicate = false;
  // Dropped as too stale (counted in ShardStats::dropped_stale).
  bool dropped = false;
  // Version of each pushed chunk after the push, in request order (empty for
  // a duplicate).
  std::vector<int64_t> versions;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STORE_TYPES_H_
