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
//   DP_ASSIGN_OR_RETURN(PushClaim c, table.Claim(id));
//   if (c.duplicate) return acknowledged;
//   ... apply; c.completes_push says the worker's seq is now whole ...
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
};

class PushDedupTable {
 public:
  PushDedupTable() = default;
  PushDedupTable(const PushDedupTable&) = delete;
  PushDedupTable& operator=(const PushDedupTable&) = delete;

  // Records part `id.part` of push `id.seq` of worker `id.worker_id`.
  // Preconditions (the store checks them): worker_id >= 0, seq >= 1,
  // 0 <= part < num_parts. A num_parts that differs from an earlier part of
  // the same seq is InvalidArgument and records nothing.
  absl::StatusOr<PushClaim> Claim(const PushId& id)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Which parts of its latest seq one worker has delivered.
  struct Worker {
    absl::Mutex mu;
    int64_t seq ABSL_GUARDED_BY(mu) = 0;
    int32_t num_parts ABSL_GUARDED_BY(mu) = 1;
    int32_t parts_done ABSL_GUARDED_BY(mu) = 0;
    std::vector<bool> parts ABSL_GUARDED_BY(mu);
  };
  Worker* GetWorker(int32_t worker_id) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  // Entries are never removed, so a Worker* stays valid.
  std::map<int32_t, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PUSH_DEDUP_H_
