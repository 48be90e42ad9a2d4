#include "server/sync_policy.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/byte_runs.h"
#include "server/waiting_policy.h"

namespace downpour {
namespace {

// One worker's gradient for the current step, as its parts come.
struct PendingGrad {
  uint64_t incarnation = 0;  // Of the worker process that sent it.
  int64_t seq = 0;
  int32_t num_parts = 1;
  int32_t parts_in = 0;
  int64_t chunks_in = 0;
  std::vector<bool> have;   // By local chunk index.
  std::vector<float> grad;  // The shard's chunks concatenated, local order.
  bool complete() const { return parts_in == num_parts; }
};

class SyncPolicy final : public WaitingPolicy {
 public:
  explicit SyncPolicy(StepContext ctx) : WaitingPolicy(std::move(ctx)) {}

  absl::Status CheckPush(const PushId& id, size_t num_chunks) override;
  absl::StatusOr<PushResult> Apply(const PushId& id,
                                   absl::Span<const ChunkBytes> grads,
                                   bool completes_push) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool IsReadyLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return spec.min_version <= step_;
  }
  absl::Status CheckWaitLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (spec.min_version - step_ <= kMaxAhead) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "pull: min_version ", spec.min_version, " is more than ", kMaxAhead,
        " steps beyond shard ", options_.shard_index, "'s step ", step_,
        "; a worker waits for the step after the one it pushed from"));
  }
  std::string DescribeWaitLocked(const PullSpec& spec) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::StrCat("step ", spec.min_version, " (the shard is at step ",
                        step_, ", with ", CompleteCountLocked(), " of ",
                        std::max(StepTargetLocked(), 1),
                        " gradients for it in)");
  }
  // The step goes on with the gradients already in.
  int SurvivorsLocked(int) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CompleteCountLocked();
  }
  void OnLeaveLocked(int32_t, Outbox*) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    MaybeCompleteStepLocked();
  }
  void OnTickLocked(absl::Time now, Outbox* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillStatsLocked(ShardStats* s) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    s->steps = step_;
  }
  // A snapshot is of one step: every chunk at the same version.
  bool IsSnapshotConsistent(
      absl::Span<const int64_t> versions) const override {
    for (const int64_t v : versions) {
      if (v != versions.front()) return false;
    }
    return true;
  }
  int64_t SnapshotStep(absl::Span<const int64_t> versions) const override {
    return versions.empty() ? 0 : versions.back();
  }
  // The step's partial sum is not in a snapshot: a worker's retry of its
  // push for the restored step must be taken again (older steps are
  // dropped as stale anyway).
  std::vector<DedupEntry> RestoredClaims(
      std::vector<DedupEntry> saved) override {
    for (DedupEntry& e : saved) {
      e.seq = 0;
      e.parts.clear();
      e.num_parts = 1;
    }
    return saved;
  }
  // The step survives a restart of the shard (as {step}); the step's
  // pending gradients do not (the workers' retries bring them).
  std::vector<int64_t> SaveClocks() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return {step_};
  }
  absl::Status RestoreClocks(const std::vector<int64_t>& clocks) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (clocks.size() != 1 || clocks[0] < 0) {
      return absl::FailedPreconditionError("sync snapshot without its step");
    }
    step_ = clocks[0];
    restored_ = true;
    HeardAllLocked();
    return absl::OkStatus();
  }
  // After a restore (see "Snapshots and restore" in sync_policy.h): until the
  // first step completes after a restore, a request showing that the workers
  // are past the shard's step moves the shard there (AdoptStepLocked): a push
  // computed from a later step, a pull waiting for a step more than one ahead,
  // or a pull for the next step from a worker whose whole gradient for this one
  // is not here (it went to the previous process and is lost).
  void PullWhenReady(PullSpec spec, PullSink sink, PullDone done) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    Outbox out;
    {
      absl::MutexLock l(&mu_);
      if (restored_ && !AbortedLocked() && spec.min_version > step_) {
        const auto it = pending_.find(spec.worker_id);
        const bool gradient_here = it != pending_.end() && it->second.complete();
        const bool known_worker =
            spec.worker_id >= 0 && spec.worker_id < options_.num_workers;
        if (spec.min_version > step_ + 1) {
          AdoptStepLocked(spec.min_version,
                          absl::StrCat("a pull waits for step ",
                                       spec.min_version));
        } else if (known_worker && !gradient_here && spec.with_push) {
          spec.min_version = 0;  // Answered now: the worker resends first.
        } else if (known_worker && !gradient_here) {
          AdoptStepLocked(
              spec.min_version,
              absl::StrCat("worker ", spec.worker_id, " waits for step ",
                           spec.min_version, " and its gradient for step ",
                           step_, " went to the shard's previous process"));
        }
        TakeReadyWaitersLocked(&out);
      }
    }
    Deliver(&out);
    WaitingPolicy::PullWhenReady(std::move(spec), std::move(sink),
                                 std::move(done));
  }
  // Moves a restored shard to `step` (> step_), values unchanged, dropping
  // the step's partial gradients; `why` goes to the log.
  void AdoptStepLocked(int64_t step, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Adds the part to the worker's pending gradient for this step. An error
  // refuses the worker's whole gradient for the step.
  absl::Status AddPartLocked(const PushId& id,
                             absl::Span<const ChunkBytes> grads,
                             PendingGrad* p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers whose gradient for this step has all its parts.
  int CompleteCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int StepTargetLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the step if enough gradients are in.
  void MaybeCompleteStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the mean of the complete pending gradients as step_ -> step_ + 1.
  void CompleteStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties pending_, keeping its gradient buffers for the next step.
  void RecyclePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  // Restored from a snapshot and no step completed since; while set, requests
  // from workers ahead move the step (AdoptStepLocked).
  bool restored_ ABSL_GUARDED_BY(mu_) = false;
  // Gradients for step_ by worker id (ordered: deterministic sums).
  std::map<int32_t, PendingGrad> pending_ ABSL_GUARDED_BY(mu_);
  // Their buffers, kept from the last step for the next one's.
  std::vector<std::vector<float>> spare_grads_ ABSL_GUARDED_BY(mu_);
  absl::Time pending_since_ ABSL_GUARDED_BY(mu_);
};

absl::Status SyncPolicy::CheckPush(const PushId& id, size_t num_chunks) {
  DP_RETURN_IF_ERROR(WaitingPolicy::CheckPush(id, num_chunks));
  const size_t shard_chunks = ctx_.chunks->size();
  if (id.num_parts == 1 && num_chunks != shard_chunks) {
    return ctx_.metrics->Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            "push: in sync mode a push must carry every chunk of shard ",
            options_.shard_index, " (", shard_chunks,
            " chunks; a push cut into parts carries each in one of its "
            "parts), since a step averages whole gradients; this one-part "
            "push carries ", num_chunks)));
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> SyncPolicy::Apply(
    const PushId& id, absl::Span<const ChunkBytes> grads,
    bool completes_push) {
  // Not used: the parts of one push may reach this lock in another order
  // than the store claimed them (concurrent calls), so the part the store
  // saw last may come here first. The step moves on when the worker's
  // gradient here has all its parts, whichever part brings the last one.
  (void)completes_push;
  const int32_t worker_id = id.worker_id;
  PushResult result;
  Outbox out;
  absl::Status error;
  bool gradient_complete = false;
  {
    absl::MutexLock l(&mu_);
    if (AbortedLocked()) return AbortedStatusLocked();
    HeardLocked(worker_id);
    int64_t base = std::numeric_limits<int64_t>::max();
    for (const ChunkBytes& g : grads) base = std::min(base, g.base_version);
    if (restored_ && !grads.empty() && base > step_) {
      AdoptStepLocked(base, absl::StrCat("worker ", worker_id,
                                         " pushes a gradient computed from "
                                         "step ", base));
      TakeReadyWaitersLocked(&out);
    }
    auto it = pending_.find(worker_id);
    if (base >= step_ && it != pending_.end() &&
        it->second.incarnation != id.incarnation) {
      // A restarted worker (push_dedup.h refuses its old process from now
      // on): its gradient for the step replaces what the old process sent,
      // which may lack parts and would then hold the step up until the sync
      // timeout.
      ctx_.metrics->RecordDropped();
      pending_.erase(it);
      it = pending_.end();
    }
    if (base < step_ || (it != pending_.end() && it->second.seq != id.seq)) {
      // Computed from an older step, or a second gradient for this step.
      ctx_.metrics->RecordDropped();
      result.dropped = true;
    } else {
      ReactivateLocked(worker_id, absl::StrCat("step ", step_), &out);
      if (it == pending_.end()) {
        if (pending_.empty()) pending_since_ = absl::Now();
        it = pending_.emplace(worker_id, PendingGrad()).first;
        it->second.incarnation = id.incarnation;
        it->second.seq = id.seq;
        it->second.num_parts = id.num_parts;
        it->second.have.assign(ctx_.chunks->size(), false);
        // A buffer of an earlier step's gradient when there is one: not
        // cleared, as a gradient counts only once its parts wrote every
        // chunk (no allocation and no zeroing of the shard per push).
        if (!spare_grads_.empty()) {
          it->second.grad = std::move(spare_grads_.back());
          spare_grads_.pop_back();
        }
        it->second.grad.resize(ctx_.chunks->total_elements());
      }
      error = AddPartLocked(id, grads, &it->second);
      if (!error.ok()) {
        pending_.erase(it);  // The whole gradient of this step is refused.
      } else if (it->second.complete()) {
        gradient_complete = true;
        MaybeCompleteStepLocked();
        TakeReadyWaitersLocked(&out);
      }
    }
  }
  Deliver(&out);
  if (!error.ok()) return ctx_.metrics->Reject("bad_request", error);
  if (gradient_complete) ctx_.metrics->RecordPushApplied();
  return result;
}

absl::Status SyncPolicy::AddPartLocked(const PushId& id,
                                       absl::Span<const ChunkBytes> grads,
                                       PendingGrad* p) const {
  const ShardChunks& chunks = *ctx_.chunks;
  for (const ChunkBytes& g : grads) {
    if (p->have[chunks.LocalIndex(g.chunk_id)]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push: chunk ", g.chunk_id, " sent in two parts of seq ", id.seq));
    }
  }
  for (const ChunkBytes& g : grads) {
    const int idx = chunks.LocalIndex(g.chunk_id);
    p->have[idx] = true;
    ++p->chunks_in;
    CopyValues(g, p->grad.data() + chunks.offset(idx));
  }
  ++p->parts_in;
  if (p->complete() && p->chunks_in != static_cast<int64_t>(chunks.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push: in sync mode a push must carry every chunk of shard ",
        options_.shard_index, " (", chunks.size(),
        " chunks), since a step averages whole gradients; the ", p->num_parts,
        " parts of seq ", id.seq, " carried ", p->chunks_in,
        ", so this gradient is refused"));
  }
  return absl::OkStatus();
}

int SyncPolicy::CompleteCountLocked() const {
  int n = 0;
  for (const auto& [w, p] : pending_) n += p.complete() ? 1 : 0;
  return n;
}

int SyncPolicy::StepTargetLocked() const {
  // Workers that contributed to this step and then left still count for it.
  int active = ActiveCountLocked();
  for (const auto& [worker, grad] : pending_) {
    if (!active_[worker] && grad.complete()) ++active;
  }
  return options_.replicas_to_aggregate > 0
             ? std::min(options_.replicas_to_aggregate, active)
             : active;
}

void SyncPolicy::MaybeCompleteStepLocked() {
  const int complete = CompleteCountLocked();
  if (complete == 0) return;
  if (complete >= std::max(StepTargetLocked(), 1)) CompleteStepLocked();
}

void SyncPolicy::CompleteStepLocked() {
  // Gradients still missing parts when the step completes are dropped.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.complete()) {
      ++it;
    } else {
      ctx_.metrics->RecordDropped();
      it = pending_.erase(it);
    }
  }
  if (pending_.empty()) return;
  const ShardChunks& chunks = *ctx_.chunks;
  const float scale = 1.0f / static_cast<float>(pending_.size());
  // The sum is 0 + g[0] + g[1] + ... in worker-index order (std::map), so
  // it is the same on every run; it is formed in the first worker's buffer,
  // which is recycled after the step (no buffer of its own, one pass less).
  float* const sum = pending_.begin()->second.grad.data();
  for (size_t idx = 0; idx < chunks.size(); ++idx) {
    ChunkState& st = chunks.at(idx);
    const int64_t n = st.info().num_elements;
    float* const s = sum + chunks.offset(idx);
    auto it = pending_.begin();
    if (pending_.size() == 1) {
      for (int64_t i = 0; i < n; ++i) s[i] = 0.0f + s[i];
    } else {
      // The first two in one pass, then one pass per further worker.
      const float* g = (++it)->second.grad.data() + chunks.offset(idx);
      for (int64_t i = 0; i < n; ++i) s[i] = (0.0f + s[i]) + g[i];
      for (++it; it != pending_.end(); ++it) {
        g = it->second.grad.data() + chunks.offset(idx);
        for (int64_t i = 0; i < n; ++i) s[i] += g[i];
      }
    }
    st.ApplyDense(s, scale, *ctx_.optimizer, step_ + 1);
  }
  // Every chunk update of a sync step is fresh: staleness 0, counted per
  // chunk update as in async mode.
  ctx_.metrics->RecordStaleness(
      0, static_cast<int64_t>(pending_.size() * chunks.size()));
  ++step_;
  RecyclePendingLocked();
  restored_ = false;  // From here on, steps advance only by pushes.
}

void SyncPolicy::RecyclePendingLocked() {
  for (auto& [worker, p] : pending_) {
    if (spare_grads_.size() < pending_.size()) {
      spare_grads_.push_back(std::move(p.grad));
    }
  }
  pending_.clear();
}

void SyncPolicy::AdoptStepLocked(int64_t step, const std::string& why) {
  std::fprintf(stderr,
               "shard %d: restored at step %lld, the workers are at step "
               "%lld (%s): resuming there (%lld steps of this shard lost)\n",
               options_.shard_index, static_cast<long long>(step_),
               static_cast<long long>(step), why.c_str(),
               static_cast<long long>(step - step_));
  for (size_t i = 0; i < pending_.size(); ++i) ctx_.metrics->RecordDropped();
  RecyclePendingLocked();
  const ShardChunks& chunks = *ctx_.chunks;
  for (size_t idx = 0; idx < chunks.size(); ++idx) {
    chunks.at(idx).AdvanceVersion(step);
  }
  step_ = step;
}

void SyncPolicy::OnTickLocked(absl::Time now, Outbox* out) {
  if (pending_.empty() || now - pending_since_ <= options_.sync_timeout) {
    return;
  }
  // Missing: evicted now (joining: never heard from). Late: not heard from
  // yet, still waited for; waiting: heard from only lately.
  std::vector<int32_t> missing, joining, late;
  bool waiting = false;
  for (int32_t w = 0; w < static_cast<int32_t>(active_.size()); ++w) {
    auto it = pending_.find(w);
    if (!active_[w] || (it != pending_.end() && it->second.complete())) {
      continue;
    }
    const bool heard = IsHeardLocked(w);
    if (!OverdueLocked(w, pending_since_, now)) {
      if (heard) waiting = true;
      else late.push_back(w);
    } else {
      (heard ? missing : joining).push_back(w);
    }
  }
  if (!missing.empty()) {
    EvictLocked(missing,
                absl::StrCat("no gradient for step ", step_, " within ",
                             absl::FormatDuration(options_.sync_timeout)),
                out);
  }
  if (!joining.empty() && !AbortedLocked()) {
    EvictLocked(joining,
                absl::StrCat("not heard from within the join timeout of ",
                             absl::FormatDuration(JoinPatience())),
                out);
  }
  NoteLateJoinersLocked(late, out);
  if (!late.empty() || waiting) return;
  if (!AbortedLocked() && CompleteCountLocked() >= options_.min_replicas) {
    CompleteStepLocked();
  }
}

}  // namespace

std::unique_ptr<StepPolicy> NewSyncPolicy(StepContext ctx) {
  return std::make_unique<SyncPolicy>(std::move(ctx));
}

}  // namespace downpour
