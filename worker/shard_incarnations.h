// File: worker/shard_incarnations.h
//
// Tells the gRPC parameter client when a shard's server process restarted.
// Every reply of a server carries its incarnation (a random number drawn at
// start-up, common/incarnation.h); a new one after another means the shard
// restarted, which is logged once:
//
//   worker 3: shard 1 restarted (incarnation 0123456789abcdef -> ...);
//   re-pulling its parameters (1 shard restart seen)
//
// A push cut into parts may have some parts acknowledged by the shard's old
// process and later ones by its new process. The old process's copy died
// with it (unless its snapshot holds it, in which case the new one takes the
// part as a duplicate), and in sync mode a gradient missing parts is
// dropped: ResendStaleParts sends such parts again, with the same (seq,
// part). Pulls always read every chunk afresh (no version or delta is kept
// from the old process), so the next pull brings the restored values.
//
//   ShardIncarnations incarnations(worker_id, num_shards);
//   incarnations.Saw(shard, reply.server_incarnation());  // Every reply.
//   DP_RETURN_IF_ERROR(incarnations.ResendStaleParts(
//       seq, parts, &part_inc, [&](const std::vector<int>& stale) {
//         return SendAgain(stale);  // Saw() and part_inc[i] for each reply.
//       }));
//
// Thread-safety: Saw and the accessors may be called from any thread.
#ifndef DOWNPOUR_WORKER_SHARD_INCARNATIONS_H_
#define DOWNPOUR_WORKER_SHARD_INCARNATIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "worker/part_plan.h"

namespace downpour {

class ShardIncarnations {
 public:
  // Receives each log line, without its newline.
  using LogFn = std::function<void(const std::string& line)>;

  // `log` null: lines go to stderr. It may be called with a lock held and
  // must not call back into this object.
  ShardIncarnations(int worker_id, int num_shards, LogFn log = nullptr);

  // A reply of `shard` came from server incarnation `inc` (0: a server that
  // sends none, ignored). A new one after another means the shard
  // restarted: logged and counted once. A late reply of a process already
  // replaced is not a restart.
  void Saw(int shard, uint64_t inc) ABSL_LOCKS_EXCLUDED(mu_);

  // The shard's incarnation as last seen (0: no reply yet).
  uint64_t current(int shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // Restarts noticed so far.
  int64_t restarts_seen() const ABSL_LOCKS_EXCLUDED(mu_);

  // The parts (indices into `parts`) that an incarnation of their shard
  // other than its current one acknowledged (part_inc[i]; 0: unknown).
  std::vector<int> StaleParts(absl::Span<const Part> parts,
                              absl::Span<const uint64_t> part_inc) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // After push `seq` (part i acknowledged by incarnation (*part_inc)[i]),
  // logs and calls resend(stale) while StaleParts is not empty, at most
  // three rounds (a shard restarting again meanwhile starts another).
  // `resend` sends those parts again and, for each reply, calls Saw and
  // updates *part_inc; its error is returned.
  absl::Status ResendStaleParts(
      int64_t seq, absl::Span<const Part> parts,
      const std::vector<uint64_t>* part_inc,
      const std::function<absl::Status(const std::vector<int>&)>& resend);

 private:
  const int worker_id_;
  const LogFn log_;
  mutable absl::Mutex mu_;
  // Each shard's incarnation as last seen (0: no reply yet).
  std::vector<uint64_t> current_ ABSL_GUARDED_BY(mu_);
  // The incarnations each shard's current one replaced.
  std::vector<std::vector<uint64_t>> retired_ ABSL_GUARDED_BY(mu_);
  int64_t restarts_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SHARD_INCARNATIONS_H_
