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

// Pushes of a worker further behind its latest than this are no longer
// waited for to complete (PartsIn).
constexpr int64_t kKeptPushes = 8;

class SspPolicy final : public WaitingPolicy {
 public:
  explicit SspPolicy(StepContext ctx) : WaitingPolicy(std::move(ctx)) {
    absl::MutexLock l(&mu_);
    clock_.assign(std::max(options_.num_workers, 0), 0);
    parts_in_.resize(clock_.size());
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
    HeardAllLocked();
    return absl::OkStatus();
  }
  // A push's parts already applied before a restart of the shard: the
  // parts its snapshot holds claims for.
  std::vector<DedupEntry> RestoredClaims(
      std::vector<DedupEntry> saved) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    for (const DedupEntry& e : saved) {
      const int32_t in = static_cast<int32_t>(
          std::count(e.parts.begin(), e.parts.end(), true));
      if (e.worker_id >= 0 &&
          e.worker_id < static_cast<int>(parts_in_.size()) && in > 0 &&
          in < e.num_parts) {
        parts_in_[e.worker_id] = {{e.incarnation, e.seq, in}};
      }
    }
    return saved;
  }
  // Counts an applied part of push `id`; true when it was the push's last.
  bool PartAppliedLocked(const PushId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The lowest clock of an active worker; int64 max when none is active.
  int64_t MinActiveClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whole pushes done, by worker id.
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);
  // By worker id, the pushes some of whose parts are applied (usually one).
  struct PartsIn {
    uint64_t incarnation = 0;
    int64_t seq = 0;
    int32_t applied = 0;
  };
  std::vector<std::vector<PartsIn>> parts_in_ ABSL_GUARDED_BY(mu_);
  int64_t max_lead_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<PushResult> SspPolicy::Apply(
    const PushId& id, absl::Span<const ChunkBytes> grads,
    bool completes_push) {
  // Not used: the store claims a push's parts in one order, and concurrent
  // calls may apply them in another. The clock, which lets pulls read the
  // push, moves once every part has been applied here.
  (void)completes_push;
  {
    absl::MutexLock l(&mu_);
    if (AbortedLocked()) return AbortedStatusLocked();
    HeardLocked(id.worker_id);
  }
  PushResult result;
  ApplyOnArrival(ctx_, StalenessRule(), grads, &result);
  Outbox out;
  bool whole = false;
  {
    absl::MutexLock l(&mu_);
    whole = PartAppliedLocked(id);
    if (whole) {
      const int64_t clock = ++clock_[id.worker_id];
      ReactivateLocked(id.worker_id, absl::StrCat("clock ", clock), &out);
      TakeReadyWaitersLocked(&out);
    }
  }
  Deliver(&out);
  if (whole) ctx_.metrics->RecordPushApplied();
  return result;
}

bool SspPolicy::PartAppliedLocked(const PushId& id) {
  if (id.num_parts <= 1) return true;
  std::vector<PartsIn>& in = parts_in_[id.worker_id];
  // A new process of the worker: the old one's unfinished pushes never
  // complete. Nor do pushes far behind this one (the store refuses parts
  // of older pushes; only a part already claimed can still be applying).
  in.erase(std::remove_if(in.begin(), in.end(),
                          [&](const PartsIn& p) {
                            return p.incarnation != id.incarnation ||
                                   p.seq < id.seq - kKeptPushes;
                          }),
           in.end());
  auto it = std::find_if(in.begin(), in.end(),
                         [&](const PartsIn& p) { return p.seq == id.seq; });
  if (it == in.end()) {
    in.push_back({id.incarnation, id.seq, 0});
    it = in.end() - 1;
  }
  if (++it->applied < id.num_parts) return false;
  in.erase(it);
  return true;
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
// evicts nobody; WaitingPolicy answers it DEADLINE_EXCEEDED. A laggard not
// heard from yet is evicted only after the join timeout.
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
    std::vector<int32_t> laggards, late;
    for (int32_t id = 0; id < static_cast<int32_t>(clock_.size()); ++id) {
      if (!active_[id] || clock_[id] >= bound) continue;
      if (OverdueLocked(id, w.since, now)) {
        laggards.push_back(id);
      } else if (!IsHeardLocked(id)) {
        late.push_back(id);
      }
    }
    NoteLateJoinersLocked(late, out);
    if (!laggards.empty()) {
      EvictLocked(laggards,
                  absl::StrCat("clock behind ", bound, " for ",
                               absl::FormatDuration(options_.sync_timeout),
                               " or more"),
                  out);
    }
  }
}

}  // namespace

std::unique_ptr<StepPolicy> NewSspPolicy(StepContext ctx) {
  return std::make_unique<SspPolicy>(std::move(ctx));
}

}  // namespace downpour
