#include "server/async_policy.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace downpour {

void ApplyOnArrival(const StepContext& ctx, const StalenessRule& rule,
                    absl::Span<const ChunkBytes> grads, PushResult* result) {
  const ShardChunks& chunks = *ctx.chunks;
  result->versions.reserve(grads.size());
  for (const ChunkBytes& g : grads) {
    ChunkState& st = chunks.at(chunks.LocalIndex(g.chunk_id));
    int64_t staleness = 0;
    if (st.ApplyGradient(g, *ctx.optimizer, rule, &staleness)) {
      ctx.metrics->RecordStaleness(staleness);
    } else {
      result->dropped = true;
    }
    result->versions.push_back(st.version());
  }
  if (result->dropped) ctx.metrics->RecordDropped();
}

namespace {

class AsyncPolicy final : public StepPolicy {
 public:
  explicit AsyncPolicy(StepContext ctx)
      : ctx_(std::move(ctx)),
        rule_{ctx_.options->staleness_aware,
              ctx_.options->drop_stale_threshold} {}

  absl::Status CheckPush(const PushId& id, size_t) override {
    return CheckWorker(id.worker_id, "push");
  }

  absl::StatusOr<PushResult> Apply(const PushId&,
                                   absl::Span<const ChunkBytes> grads,
                                   bool completes_push) override {
    PushResult result;
    ApplyOnArrival(ctx_, rule_, grads, &result);
    if (completes_push) ctx_.metrics->RecordPushApplied();
    return result;
  }

  void PullWhenReady(PullSpec spec, PullSink sink, PullDone done) override {
    done(ctx_.read(spec, sink));
  }

  absl::Status Leave(int32_t worker_id) override {
    return CheckWorker(worker_id, "leave");
  }
  absl::Duration TickInterval() const override {
    return absl::ZeroDuration();
  }
  void OnTick() override {}
  void Shutdown() override {}
  void FillStats(ShardStats*) const override {}

 private:
  // Ids at or above num_workers, when it is given, are not of this job.
  absl::Status CheckWorker(int32_t worker_id, const char* what) const {
    const int32_t workers = ctx_.options->num_workers;
    if (workers == 0 || worker_id < workers) return absl::OkStatus();
    return ctx_.metrics->Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            what, ": worker_id ", worker_id, " is not below the job's ",
            workers, " workers (--num_workers)")));
  }

  const StepContext ctx_;
  const StalenessRule rule_;
};

}  // namespace

std::unique_ptr<StepPolicy> NewAsyncPolicy(StepContext ctx) {
  return std::make_unique<AsyncPolicy>(std::move(ctx));
}

}  // namespace downpour
