// File: server/waiting_policy.h
//
// The part the sync and ssp modes share: a job of `num_workers` workers of
// which some are active, pulls that wait until the mode lets them through,
// and no wait longer than `sync_timeout` (plus one tick; `join_timeout`
// while a worker has not been heard from, see "Late joiners" below),
// whatever a pull asks for: a worker that leaves is no longer waited for,
// and after `sync_timeout` the workers being waited for are evicted (named
// in the log and the stats) and the job goes on with the rest, or, when
// fewer than
// `min_replicas` remain, is aborted: every later push and waiting pull then
// fails with ABORTED naming the missing workers. The subclass evicts only on
// behalf of a worker that is ahead (see OnTickLocked); a pull still waiting
// after `sync_timeout` is then answered DEADLINE_EXCEEDED, naming what it
// waited for, and evicts nobody. A pull asking for more than kMaxAhead
// steps or clocks beyond the shard's furthest is refused at once
// (InvalidArgument): no worker of the job asks that.
//
// Late joiners. A worker that has not pushed to this shard process yet may
// still be starting (workers of one job can come up minutes apart): it is
// waited for up to `join_timeout` instead (when that is longer), the pulls
// waiting meanwhile too, and the shard logs once that it waits for it.
// Evicting it after sync_timeout would make the first steps average fewer
// gradients and the run differ from one whose workers started together.
//
// A subclass (SyncPolicy, SspPolicy) says when a pull is ready and what a
// timeout or a leave does, in hooks called with mu_ held. Messages for the
// log and pulls made ready are collected in an Outbox while mu_ is held and
// delivered by Deliver() after it is released, so no callback (log, sink,
// done) ever runs under mu_.
//
// Thread-safety: see server/step_policy.h.
#ifndef DOWNPOUR_SERVER_WAITING_POLICY_H_
#define DOWNPOUR_SERVER_WAITING_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/step_policy.h"

namespace downpour {

// Checks the options the sync and ssp modes need: num_workers >= 1,
// 0 <= replicas_to_aggregate <= num_workers, 1 <= min_replicas <=
// num_workers, staleness >= 0, a positive sync_timeout, and none of the
// async-only options.
absl::Status ValidateWaitingOptions(const ParameterStoreOptions& o);

class WaitingPolicy : public StepPolicy {
 public:
  // ctx.options must satisfy ValidateWaitingOptions.
  explicit WaitingPolicy(StepContext ctx);

  // Refuses worker ids at or above num_workers.
  absl::Status CheckPush(const PushId& id, size_t num_chunks) override;
  void PullWhenReady(PullSpec spec, PullSink sink, PullDone done) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Leave(int32_t worker_id) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration TickInterval() const override;
  void OnTick() override ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() override ABSL_LOCKS_EXCLUDED(mu_);
  // Sets evicted_workers and aborted, then the subclass's FillStatsLocked.
  void FillStats(ShardStats* s) const override ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  // A pull waiting for a sync step or for the ssp bound.
  struct Waiter {
    PullSpec spec;
    PullSink sink;
    PullDone done;
    absl::Time since;
  };
  // What to do once mu_ is released.
  struct Outbox {
    std::vector<std::string> logs;
    std::list<Waiter> ready;
    // Pulls that waited past the timeout, with their answer.
    std::vector<std::pair<Waiter, absl::Status>> expired;
  };

  // How far beyond the furthest step (sync) or clock (ssp) of the shard a
  // pull may ask to wait for. A worker asks for the step after the one it
  // read on its first shard, or for its own clock, which the shard has seen;
  // shards of one job drift apart by a step or two (more with backup
  // workers), never by this much.
  static constexpr int64_t kMaxAhead = 16;

  // ---- Hooks, called with mu_ held ----
  // InvalidArgument when `spec` asks to wait for something no worker of the
  // job asks for (more than kMaxAhead beyond the shard); checked before a
  // pull waits (not when the job is aborted or shutting down).
  virtual absl::Status CheckWaitLocked(const PullSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::OkStatus();
  }
  // What a pull with `spec` waits for and where the shard stands, for the
  // message of a pull that waited past the timeout, e.g. "step 3 (the shard
  // is at step 1, ...)".
  virtual std::string DescribeWaitLocked(const PullSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // True when the mode lets `spec` be answered now (not asked when the job
  // is aborted or shutting down: those answer every pull).
  virtual bool IsReadyLocked(const PullSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // A pull with `spec` is about to be answered.
  virtual void OnPullAnsweredLocked(const PullSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // How many workers the job goes on with after an eviction left
  // `remaining` active ones (compared with min_replicas).
  virtual int SurvivorsLocked(int remaining) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // `worker_id` left (already marked inactive).
  virtual void OnLeaveLocked(int32_t worker_id, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // A timer tick at `now` while the job is neither aborted nor stopping:
  // evicts the workers that a worker ahead of them has waited for longer than
  // `sync_timeout`. Waiting pulls still not ready afterwards and older than
  // `sync_timeout` are then answered DEADLINE_EXCEEDED.
  virtual void OnTickLocked(absl::Time now, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  virtual void FillStatsLocked(ShardStats* s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // ---- Helpers for subclasses ----
  bool AbortedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty();
  }
  absl::Status AbortedStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(aborted_);
  }
  int ActiveCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `worker_id` (checked) pushed to this shard process; every worker, for a
  // shard restored from a snapshot (heard from by its previous process).
  void HeardLocked(int32_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeardAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsHeardLocked(int32_t worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return heard_at_[worker_id] != absl::InfiniteFuture();
  }
  // Whether a wait for `worker_id` that began at `since` is over at `now`:
  // sync_timeout from `since`, or from when the worker was first heard
  // from if that is later; before that, the join timeout (when longer).
  bool OverdueLocked(int32_t worker_id, absl::Time since, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration JoinPatience() const {
    return std::max(options_.sync_timeout, options_.join_timeout);
  }
  // Logs, once per shard process, that it waits for `workers` (not heard
  // from yet) beyond sync_timeout.
  void NoteLateJoinersLocked(const std::vector<int32_t>& workers, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `worker_id` active again after an eviction, with a log line
  // "worker N is back at <where>".
  void ReactivateLocked(int32_t worker_id, const std::string& where,
                        Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops waiting for `workers`; aborts the job when too few remain.
  void EvictLocked(const std::vector<int32_t>& workers, const std::string& why,
                   Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the waiting pulls that can be answered now into out->ready.
  void TakeReadyWaitersLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs the messages, answers the expired pulls (counted as refused,
  // "wait_timeout"), then the ready pulls (ABORTED if the job is).
  void Deliver(Outbox* out) ABSL_LOCKS_EXCLUDED(mu_);

  const StepContext ctx_;
  const ParameterStoreOptions& options_;  // *ctx_.options

  mutable absl::Mutex mu_;
  // By worker id: not left and not evicted (or back since).
  std::vector<bool> active_ ABSL_GUARDED_BY(mu_);
  // Oldest first.
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);

 private:
  bool ReadyLocked(const PullSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty() || stopping_ || IsReadyLocked(spec);
  }
  // Moves the pulls waiting since before now - sync_timeout into
  // out->expired with DEADLINE_EXCEEDED.
  void ExpireWaitersLocked(absl::Time now, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whether a pull waiting since `since` has waited long enough at `now`:
  // as long as for any active worker (OverdueLocked).
  bool WaiterOverdueLocked(absl::Time since, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // By worker id: when it first pushed to this shard process
  // (InfiniteFuture: not yet; InfinitePast: before a restore).
  std::vector<absl::Time> heard_at_ ABSL_GUARDED_BY(mu_);
  bool late_joiners_noted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int32_t> evicted_ ABSL_GUARDED_BY(mu_);
  std::string aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_WAITING_POLICY_H_
