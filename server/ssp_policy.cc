#include "server/ssp_policy.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/async_policy.h"
#include "server/waiting_policy.h"

namespace downpour {
namespace {

class SspPolicy final : public WaitingPolicy {
 public:
  explicit SspPolicy(StepContext ctx) : WaitingPolicy(std::move(ctx)) {
    absl::MutexLock l(&mu_);
    clock_.assign(std::max(options_.num_workers, 0), 0);
  }

  absl::StatusOr<PushResult> Apply(const PushId& id,
                                   absl::Span<const ChunkBytes> grads,
                                   bool completes_push) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool IsReadyLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckWaitLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeWaitLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers how far ahead of the slowest worker a pull was answered.
  void OnPullAnsweredLocked(const PullSpec& spec) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job goes on with the workers left.
  int SurvivorsLocked(int remaining) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return remaining;
  }
  void OnTickLocked(absl::Time now, Outbox* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillStatsLocked(ShardStats* s) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    s->ssp_max_lead = max_lead_;
  }
  // The clocks survive a restart of the shard.
  std::vector<int64_t> SaveClocks() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return clock_;
  }
  absl::Status RestoreClocks(const std::vector<int64_t>& clocks) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (clocks.size() != clock_.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "snapshot has clocks of ", clocks.size(), " workers, the shard runs ",
          clock_.size()));
    }
    clock_ = clocks;
    return absl::OkStatus();
  }
  // The lowest clock of an active worker; int64 max when none is active.
  int64_t MinActiveClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whole pushes done, by worker id.
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);
  int64_t max_lead_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<PushResult> SspPolicy::Apply(
    const PushId& id, absl::Span<const ChunkBytes> grads,
    bool completes_push) {
  {
    absl::MutexLock l(&mu_);
    if (AbortedLocked()) return AbortedStatusLocked();
  }
  PushResult result;
  ApplyOnArrival(ctx_, StalenessRule(), grads, &result);
  if (!completes_push) return result;
  ctx_.metrics->RecordPushApplied();
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    const int64_t clock = ++clock_[id.worker_id];
    ReactivateLocked(id.worker_id, absl::StrCat("clock ", clock), &out);
    TakeReadyWaitersLocked(&out);
  }
  Deliver(&out);
  return result;
}

int64_t SspPolicy::MinActiveClockLocked() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clock_.size(); ++w) {
    if (active_[w]) min_clock = std::min(min_clock, clock_[w]);
  }
  return min_clock;
}

bool SspPolicy::IsReadyLocked(const PullSpec& spec) const {
  if (spec.worker_clock < 0) return true;
  const int64_t min_clock = MinActiveClockLocked();
  return min_clock == std::numeric_limits<int64_t>::max() ||
         min_clock >= spec.worker_clock - options_.staleness;
}

void SspPolicy::OnPullAnsweredLocked(const PullSpec& spec) {
  if (spec.worker_clock < 0) return;
  const int64_t min_clock = MinActiveClockLocked();
  if (min_clock == std::numeric_limits<int64_t>::max()) return;
  max_lead_ = std::max(max_lead_, spec.worker_clock - min_clock);
}

absl::Status SspPolicy::CheckWaitLocked(const PullSpec& spec) const {
  if (spec.worker_clock < 0) return absl::OkStatus();
  const int64_t max_clock = *std::max_element(clock_.begin(), clock_.end());
  if (spec.worker_clock - max_clock <= kMaxAhead) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "pull: worker_clock ", spec.worker_clock, " is more than ", kMaxAhead,
      " beyond the furthest clock on shard ", options_.shard_index, " (",
      max_clock, "); a worker pulls with the clock of the pushes it made"));
}

std::string SspPolicy::DescribeWaitLocked(const PullSpec& spec) const {
  return absl::StrCat("every active worker to reach clock ",
                      spec.worker_clock - options_.staleness, " (worker_clock ",
                      spec.worker_clock, " - staleness ", options_.staleness,
                      "); no active worker is at clock ", spec.worker_clock,
                      ", the slowest is at ", MinActiveClockLocked());
}

// A waiter overdue for `sync_timeout` evicts the laggards below its bound
// only when some active worker is at its clock: the worker pulling (its own
// pushes are in before it pulls). A pull no active worker stands behind
// evicts nobody; WaitingPolicy answers it DEADLINE_EXCEEDED.
void SspPolicy::OnTickLocked(absl::Time now, Outbox* out) {
  for (const Waiter& w : waiters_) {
    if (AbortedLocked()) return;
    if (now - w.since <= options_.sync_timeout) continue;
    bool someone_at_clock = false;
    for (size_t id = 0; id < clock_.size(); ++id) {
      someone_at_clock |= active_[id] && clock_[id] >= w.spec.worker_clock;
    }
    if (!someone_at_clock) continue;
    const int64_t bound = w.spec.worker_clock - options_.staleness;
    std::vector<int32_t> laggards;
    for (int32_t id = 0; id < static_cast<int32_t>(clock_.size()); ++id) {
      if (active_[id] && clock_[id] < bound) laggards.push_back(id);
    }
    if (!laggards.empty()) {
      EvictLocked(laggards,
                  absl::StrCat("clock behind ", bound, " for ",
                               absl::FormatDuration(options_.sync_timeout)),
                  out);
    }
  }
}

}  // namespace

std::unique_ptr<StepPolicy> NewSspPolicy(StepContext ctx) {
  return std::make_unique<SspPolicy>(std::move(ctx));
}

}  // namespace downpour
