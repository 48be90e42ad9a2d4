// File: server/chunk_storage.h
//
// The values a shard holds: one ChunkState per owned chunk (copy-on-write
// float32 values, the optimizer state beside them, the version), and
// ShardChunks, the shard's chunks in local order with their offsets in the
// shard's concatenation. No policy lives here: the store validates requests
// and the step policies (server/step_policy.h) decide what to apply when.
//
// Values are copy-on-write: a read takes a reference to the current buffer
// (no copy; the chunk's lock is held only for that), and an update writes in
// place when no reader holds the buffer, else into a spare buffer that then
// becomes current. Once an update has overlapped a read of a chunk, the chunk
// keeps its spare for reuse (no allocation or page faults on later overlaps):
// a busy shard holds up to twice its values in memory, plus buffers that slow
// readers still hold.
//
//   ShardChunks chunks = ShardChunks::ForShard(map, shard_index);
//   ChunkState& c = chunks.at(chunks.LocalIndex(chunk_id));
//   c.Initialize(initial_bytes, optimizer);
//   c.Read([&](const ChunkView& v) { ... });
//
// Thread-safety: every ChunkState method may be called concurrently (each
// chunk has its own lock). ShardChunks is immutable once built; the store
// replaces it only before it serves requests.
#ifndef DOWNPOUR_SERVER_CHUNK_STORAGE_H_
#define DOWNPOUR_SERVER_CHUNK_STORAGE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/sharding.h"
#include "server/optimizer.h"
#include "server/store_types.h"

namespace downpour {

// How an update that arrives on its own is scaled or dropped by staleness
// (the chunk's version minus the version the gradient was computed from).
struct StalenessRule {
  // Scale the update by 1 / max(1, staleness).
  bool staleness_aware = false;
  // Drop updates whose staleness exceeds this (0: never drop).
  int64_t drop_threshold = 0;
};

class ChunkState {
 public:
  explicit ChunkState(const Chunk& info) : info_(info) {}
  ChunkState(const ChunkState&) = delete;
  ChunkState& operator=(const ChunkState&) = delete;

  const Chunk& info() const { return info_; }
  // The number of updates applied; read without the lock (for validation and
  // stats, which tolerate a concurrent update).
  int64_t version() const { return version_.load(std::memory_order_relaxed); }

  // Gives the chunk its initial values (validated: full size, finite) and a
  // fresh optimizer state. Returns false, changing nothing, when the chunk
  // already has values.
  bool Initialize(const ChunkBytes& values, const Optimizer& optimizer)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `sink` under the chunk's lock with the current values and version;
  // the view's owner keeps the values alive and unchanged. Needs values.
  template <typename Sink>
  void Read(Sink&& sink) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    sink(ChunkView{info_.id, version_.load(std::memory_order_relaxed),
                   values_->data(), info_.num_elements, values_});
  }

  // Applies one validated gradient (full size, finite) with `optimizer`
  // under `rule`; sets *staleness. Returns false (nothing applied) when the
  // rule drops it. Bumps the version by one otherwise.
  bool ApplyGradient(const ChunkBytes& grad, const Optimizer& optimizer,
                     const StalenessRule& rule, int64_t* staleness)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Applies the dense gradient grad[0 .. num_elements) scaled by `scale`,
  // and sets the version to `new_version`.
  void ApplyDense(const float* grad, float scale, const Optimizer& optimizer,
                  int64_t new_version) ABSL_LOCKS_EXCLUDED(mu_);

  // For a snapshot (server/shard_snapshot.h): everything the chunk needs to go
  // on, taken under its lock. The values are the current copy-on-write buffer
  // (shared, never written again: a later update writes a spare), so the lock
  // is held for the optimizer state's copy only. Needs values.
  struct Saved {
    std::shared_ptr<const std::vector<float>> values;
    std::vector<float> opt_state;
    int64_t version = 0;
  };
  Saved Save() const ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces values, optimizer state and version (sizes checked by the
  // caller: num_elements values, num_elements * StateSize() state).
  void Restore(std::vector<float> values, std::vector<float> opt_state,
               int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the version forward to `version` (never back), values unchanged: a
  // restored sync shard adopting the workers' step.
  void AdvanceVersion(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using ValuesBuffer = std::vector<float>;

  // The current values, writable: copies them first if a reader holds them.
  float* MutableValues() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when no reader holds `buf`, so it may be written.
  static bool Unshared(const std::shared_ptr<ValuesBuffer>& buf);

  const Chunk info_;
  mutable absl::Mutex mu_;
  std::shared_ptr<ValuesBuffer> values_ ABSL_GUARDED_BY(mu_);
  // A retired buffer kept for the next copy-on-write (may still be read).
  std::shared_ptr<ValuesBuffer> spare_ ABSL_GUARDED_BY(mu_);
  std::vector<float> opt_state_ ABSL_GUARDED_BY(mu_);
  // Written under mu_; read without it (see version()).
  std::atomic<int64_t> version_{0};
};

// One shard's chunks in local order (the order of the shard map's list for
// this shard). Move-only; empty until built from a shard map.
class ShardChunks {
 public:
  ShardChunks() = default;
  static ShardChunks ForShard(const ShardMap& map, int32_t shard_index);

  size_t size() const { return chunks_.size(); }
  // Index in local order of an owned chunk id, or -1.
  int LocalIndex(int32_t chunk_id) const {
    if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(local_index_.size())) {
      return -1;
    }
    return local_index_[chunk_id];
  }
  ChunkState& at(size_t idx) const { return *chunks_[idx]; }
  // Offset of local chunk idx in the shard's values concatenated in local
  // order, and the concatenation's size.
  int64_t offset(size_t idx) const { return offsets_[idx]; }
  int64_t total_elements() const { return total_elements_; }

 private:
  std::vector<std::unique_ptr<ChunkState>> chunks_;
  std::vector<int> local_index_;  // chunk id -> index in chunks_, or -1
  std::vector<int64_t> offsets_;
  int64_t total_elements_ = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_CHUNK_STORAGE_H_
