#include "server/waiting_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace downpour {

absl::Status ValidateWaitingOptions(const ParameterStoreOptions& o) {
  const int w = o.num_workers;
  if (w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode ", TrainModeName(o.mode), " needs num_workers >= 1"));
  }
  if (o.replicas_to_aggregate < 0 || o.replicas_to_aggregate > w ||
      o.min_replicas < 1 || o.min_replicas > w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 0 <= replicas_to_aggregate <= num_workers and 1 <= "
        "min_replicas <= num_workers, got ", o.replicas_to_aggregate,
        ", ", o.min_replicas, " with ", w, " workers"));
  }
  if (o.staleness < 0 || o.sync_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "staleness must be >= 0 and sync_timeout positive");
  }
  if (o.staleness_aware || o.drop_stale_threshold > 0) {
    return absl::InvalidArgumentError(
        "staleness_aware and drop_stale_threshold apply to async mode only");
  }
  return absl::OkStatus();
}

WaitingPolicy::WaitingPolicy(StepContext ctx)
    : ctx_(std::move(ctx)), options_(*ctx_.options) {
  absl::MutexLock l(&mu_);
  active_.assign(std::max(options_.num_workers, 0), true);
  heard_at_.assign(active_.size(), absl::InfiniteFuture());
}

absl::Status WaitingPolicy::CheckPush(const PushId& id, size_t) {
  if (id.worker_id >= options_.num_workers) {
    return ctx_.metrics->Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            "push: worker_id ", id.worker_id, " is not below the job's ",
            options_.num_workers, " workers")));
  }
  return absl::OkStatus();
}

void WaitingPolicy::PullWhenReady(PullSpec spec, PullSink sink,
                                  PullDone done) {
  if (spec.min_version > 0 || spec.worker_clock >= 0) {
    absl::Status abort, refused;
    {
      absl::MutexLock l(&mu_);
      if (aborted_.empty() && !stopping_) refused = CheckWaitLocked(spec);
      if (refused.ok() && !ReadyLocked(spec)) {
        waiters_.push_back({std::move(spec), std::move(sink), std::move(done),
                            absl::Now()});
        return;
      }
      if (refused.ok()) OnPullAnsweredLocked(spec);
      if (!aborted_.empty()) abort = AbortedStatusLocked();
    }
    if (!refused.ok()) {
      done(ctx_.metrics->Reject("bad_request", refused));
      return;
    }
    if (!abort.ok()) {
      done(abort);
      return;
    }
  }
  done(ctx_.read(spec, sink));
}

absl::Status WaitingPolicy::Leave(int32_t worker_id) {
  if (worker_id >= options_.num_workers) {
    return ctx_.metrics->Reject(
        "bad_request", absl::InvalidArgumentError(absl::StrCat(
                           "leave: bad worker_id ", worker_id)));
  }
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    active_[worker_id] = false;
    OnLeaveLocked(worker_id, &out);
    TakeReadyWaitersLocked(&out);
  }
  Deliver(&out);
  return absl::OkStatus();
}

absl::Duration WaitingPolicy::TickInterval() const {
  return std::min(absl::Milliseconds(20), options_.sync_timeout / 4);
}

void WaitingPolicy::OnTick() {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    if (!aborted_.empty()) {
      out.ready.swap(waiters_);
    } else {
      const absl::Time now = absl::Now();
      OnTickLocked(now, &out);
      TakeReadyWaitersLocked(&out);
      ExpireWaitersLocked(now, &out);
    }
  }
  Deliver(&out);
}

void WaitingPolicy::ExpireWaitersLocked(absl::Time now, Outbox* out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!WaiterOverdueLocked(it->since, now)) {
      ++it;
      continue;
    }
    absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        "pull on shard ", options_.shard_index, " waited ",
        absl::FormatDuration(absl::Trunc(now - it->since,
                                         absl::Milliseconds(1))),
        ", past the sync timeout (",
        absl::FormatDuration(options_.sync_timeout), "), for ",
        DescribeWaitLocked(it->spec)));
    out->expired.emplace_back(std::move(*it), std::move(status));
    it = waiters_.erase(it);  // Moved from: nothing is destroyed under mu_.
  }
}

void WaitingPolicy::Shutdown() {
  std::list<Waiter> left;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    left.swap(waiters_);
  }
  for (Waiter& w : left) w.done(absl::CancelledError("server shutting down"));
}

void WaitingPolicy::FillStats(ShardStats* s) const {
  absl::MutexLock l(&mu_);
  s->evicted_workers = evicted_;
  s->aborted = aborted_;
  FillStatsLocked(s);
}

void WaitingPolicy::HeardLocked(int32_t worker_id) {
  if (!IsHeardLocked(worker_id)) heard_at_[worker_id] = absl::Now();
}

void WaitingPolicy::HeardAllLocked() {
  for (absl::Time& t : heard_at_) {
    if (t == absl::InfiniteFuture()) t = absl::InfinitePast();
  }
}

bool WaitingPolicy::OverdueLocked(int32_t worker_id, absl::Time since,
                                  absl::Time now) const {
  if (!IsHeardLocked(worker_id)) return now - since > JoinPatience();
  return now - std::max(since, heard_at_[worker_id]) > options_.sync_timeout;
}

bool WaitingPolicy::WaiterOverdueLocked(absl::Time since,
                                        absl::Time now) const {
  if (now - since <= options_.sync_timeout) return false;
  for (int32_t w = 0; w < static_cast<int32_t>(active_.size()); ++w) {
    if (active_[w] && !OverdueLocked(w, since, now)) return false;
  }
  return true;
}

void WaitingPolicy::NoteLateJoinersLocked(const std::vector<int32_t>& workers,
                                          Outbox* out) {
  if (late_joiners_noted_ || workers.empty()) return;
  late_joiners_noted_ = true;
  out->logs.push_back(absl::StrCat(
      "waiting for worker", workers.size() > 1 ? "s " : " ",
      absl::StrJoin(workers, ", "),
      ", not heard from yet (still starting?), beyond the sync timeout: up "
      "to the join timeout of ", absl::FormatDuration(JoinPatience())));
}

int WaitingPolicy::ActiveCountLocked() const {
  return static_cast<int>(std::count(active_.begin(), active_.end(), true));
}

void WaitingPolicy::ReactivateLocked(int32_t worker_id,
                                     const std::string& where, Outbox* out) {
  if (active_[worker_id]) return;
  active_[worker_id] = true;
  out->logs.push_back(absl::StrCat("worker ", worker_id, " is back at ", where));
}

void WaitingPolicy::EvictLocked(const std::vector<int32_t>& workers,
                                const std::string& why, Outbox* out) {
  for (int32_t w : workers) {
    active_[w] = false;
    if (std::find(evicted_.begin(), evicted_.end(), w) == evicted_.end()) {
      evicted_.push_back(w);
    }
  }
  const int remaining = ActiveCountLocked();
  const std::string named = absl::StrCat(workers.size() > 1 ? "s " : " ",
                                         absl::StrJoin(workers, ", "));
  out->logs.push_back(absl::StrCat("gave up waiting for worker", named, " (",
                                   why, "); going on with ", remaining,
                                   " worker", remaining == 1 ? "" : "s"));
  const int have = SurvivorsLocked(remaining);
  if (have < options_.min_replicas) {
    aborted_ = absl::StrCat("job aborted on shard ", options_.shard_index,
                            ": worker", named, " stopped responding (", why,
                            ") and only ", have,
                            " of the required --min_replicas=",
                            options_.min_replicas, " remain");
    out->logs.push_back(aborted_);
  }
}

void WaitingPolicy::TakeReadyWaitersLocked(Outbox* out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (ReadyLocked(it->spec)) {
      OnPullAnsweredLocked(it->spec);
      out->ready.splice(out->ready.end(), waiters_, it++);
    } else {
      ++it;
    }
  }
}

void WaitingPolicy::Deliver(Outbox* out) {
  for (const std::string& msg : out->logs) ctx_.log(msg);
  out->logs.clear();
  for (auto& [waiter, status] : out->expired) {
    waiter.done(ctx_.metrics->Reject("wait_timeout", std::move(status)));
  }
  out->expired.clear();
  if (out->ready.empty()) return;
  absl::Status abort;
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.empty()) abort = AbortedStatusLocked();
  }
  for (Waiter& w : out->ready) {
    w.done(abort.ok() ? ctx_.read(w.spec, w.sink) : abort);
  }
  out->ready.clear();
}

}  // namespace downpour
