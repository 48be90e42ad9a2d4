// File: server/push_dedup.h
//
// At-most-once pushes: which parts of its latest push (seq) each worker has
// delivered to this shard. The store claims every validated push part here
// before applying it; a part already claimed for that worker and seq, or a
// part of an older seq, is a retry and must be acknowledged without being
// applied.
//
// Claiming a part and applying it are not one atomic step: a retry of a part
// that is still being applied is reported as a duplicate at once.
//
// Incarnations: seq counts within one worker process (PushId::incarnation). A
// part with an incarnation other than the worker's current one starts a new
// sequence for that worker id (a restarted process): it is never a duplicate of
// the old process's pushes. The replaced incarnation is remembered (the last
// kMaxRetired of them), and a later part from it is FailedPrecondition, so two
// live processes with one worker id fail loudly instead of dropping each
// other's pushes.
//
//   DP_ASSIGN_OR_RETURN(PushClaim c, table.Claim(id));
//   if (c.duplicate) return acknowledged;
//   ... apply; c.completes_push says the worker's seq is now whole ...
//
// Memory: one row per worker id and one bit per part of its latest push; the
// store bounds both (ids below num_workers, parts at most the shard's
// chunks), so the table holds at most W x chunks bits.
//
// Thread-safety: Claim may be called concurrently; claims of different
// workers do not wait on each other.
#ifndef DOWNPOUR_SERVER_PUSH_DEDUP_H_
#define DOWNPOUR_SERVER_PUSH_DEDUP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/store_types.h"

namespace downpour {

struct PushClaim {
  // A retry: already claimed, or of an older seq. Nothing was recorded.
  bool duplicate = false;
  // This part was the last one missing of the worker's seq.
  bool completes_push = false;
  // This part began a new incarnation of a worker that had pushed before.
  bool new_incarnation = false;
};

// One worker's row of the table, as a snapshot holds it.
struct DedupEntry {
  int32_t worker_id = 0;
  uint64_t incarnation = 0;
  int64_t seq = 0;
  int32_t num_parts = 1;
  std::vector<bool> parts;
  std::vector<uint64_t> retired;
};

class PushDedupTable {
 public:
  PushDedupTable() = default;
  PushDedupTable(const PushDedupTable&) = delete;
  PushDedupTable& operator=(const PushDedupTable&) = delete;

  // Records part `id.part` of push `id.seq` of worker `id.worker_id`.
  // Preconditions (the store checks them): worker_id >= 0, seq >= 1,
  // 0 <= part < num_parts. A num_parts that differs from an earlier part of
  // the same seq, or a seq beyond kMaxSeqJump (kMaxFirstSeq), is
  // InvalidArgument and records nothing.
  absl::StatusOr<PushClaim> Claim(const PushId& id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The whole table, in worker order (for a snapshot), and its restore: a
  // row imported replaces that worker's row.
  std::vector<DedupEntry> Export() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Import(const std::vector<DedupEntry>& entries)
      ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr size_t kMaxRetired = 8;
  // How far a push's seq may run ahead of the worker's last one: refused
  // with InvalidArgument beyond (2^20 after a seq, 2^40 for the first of
  // an incarnation or after a sync shard's restore, which resets the rows).
  static constexpr int64_t kMaxSeqJump = int64_t{1} << 20;
  static constexpr int64_t kMaxFirstSeq = int64_t{1} << 40;

 private:
  // Which parts of its latest seq one worker has delivered.
  struct Worker {
    absl::Mutex mu;
    uint64_t incarnation ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint64_t> retired ABSL_GUARDED_BY(mu);
    int64_t seq ABSL_GUARDED_BY(mu) = 0;
    int32_t num_parts ABSL_GUARDED_BY(mu) = 1;
    int32_t parts_done ABSL_GUARDED_BY(mu) = 0;
    std::vector<bool> parts ABSL_GUARDED_BY(mu);
  };
  Worker* GetWorker(int32_t worker_id) ABSL_LOCKS_EXCLUDED(mu_);

  // A part of a new incarnation: retires the current one and resets the
  // sequence; FailedPrecondition for a retired incarnation.
  static absl::Status SwitchIncarnationLocked(const PushId& id, Worker* w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu);

  mutable absl::Mutex mu_;
  // Entries are never removed, so a Worker* stays valid.
  std::map<int32_t, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PUSH_DEDUP_H_
