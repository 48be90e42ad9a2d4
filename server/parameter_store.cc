#include "server/parameter_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/byte_runs.h"
#include "server/chunk_storage.h"
#include "server/push_dedup.h"
#include "server/shard_metrics.h"
#include "server/step_policies.h"
#include "server/step_policy.h"

namespace downpour {
namespace {

// Validates requests, claims pushes and hands them to the step policy; the
// mode's logic is all in the policy.
class ParameterStoreImpl final : public ParameterStore {
 public:
  ParameterStoreImpl(const ParameterStoreOptions& o,
                     std::unique_ptr<Optimizer> opt);
  ~ParameterStoreImpl() override;

  absl::StatusOr<bool> Declare(const ModelLayout& layout,
                               absl::Span<const ChunkBytes> initial) override
      ABSL_LOCKS_EXCLUDED(declare_mu_);
  void PullWhenReady(PullSpec spec, PullSink sink, PullDone done) override;
  absl::StatusOr<PushResult> Push(const PushId& id,
                                  absl::Span<const ChunkBytes> grads) override;
  absl::Status Leave(int32_t worker_id) override;
  void Shutdown() override ABSL_LOCKS_EXCLUDED(timer_mu_);
  ShardStats Stats() const override;
  // Snapshots (server/shard_snapshot.h).
  absl::StatusOr<ShardSnapshot> Save() const override;
  absl::Status Restore(const ShardSnapshot& s) override
      ABSL_LOCKS_EXCLUDED(declare_mu_);
  void RecordSnapshotWrite(bool ok, absl::Time when) override {
    if (ok) {
      metrics_.RecordSnapshotWritten(absl::ToUnixSeconds(when));
    } else {
      metrics_.RecordSnapshotFailed();
    }
  }
  void AdoptPushCounts(int64_t applied, int64_t duplicate) override {
    metrics_.AddPushCounts(applied, duplicate);
  }
  absl::StatusOr<ShardMap> shard_map() const override {
    if (!initialized_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError("model not declared yet");
    }
    return map_;
  }
  absl::Status Overwrite(absl::Span<const float> values) override {
    DP_RETURN_IF_ERROR(RequireInitialized("overwrite"));
    if (static_cast<int64_t>(values.size()) != chunks_.total_elements()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "overwrite: ", values.size(), " values for a shard of ",
          chunks_.total_elements()));
    }
    for (const float v : values) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError("overwrite: a value is not finite");
      }
    }
    for (size_t i = 0; i < chunks_.size(); ++i) {
      ChunkState& c = chunks_.at(i);
      ChunkState::Saved saved = c.Save();
      const float* begin = values.data() + chunks_.offset(i);
      c.Restore(std::vector<float>(begin, begin + c.info().num_elements),
                std::move(saved.opt_state), saved.version + 1);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status RequireInitialized(const char* what) {
    if (initialized_.load(std::memory_order_acquire)) return absl::OkStatus();
    return metrics_.Reject(
        "not_initialized",
        absl::FailedPreconditionError(absl::StrCat(
            what, " before the model was (fully) declared on shard ",
            options_.shard_index)));
  }
  // Size and finiteness of one chunk's bytes, for a chunk this shard owns.
  absl::Status CheckChunkBytes(const ChunkBytes& c, const char* what);
  // The mode-independent checks of a push, before anything is changed.
  absl::Status ValidatePush(const PushId& id,
                            absl::Span<const ChunkBytes> grads);
  // Declare's first call: fixes the layout and builds the chunks (undone by
  // UnstageLayout when the call's values do not check out).
  absl::Status StageLayout(const ModelLayout& layout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(declare_mu_);
  void UnstageLayout() ABSL_EXCLUSIVE_LOCKS_REQUIRED(declare_mu_);
  absl::Status CheckInitialValues(absl::Span<const ChunkBytes> initial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(declare_mu_);
  // Validates ids and reads the chunks of `spec` into `sink`.
  absl::Status Read(const PullSpec& spec, const PullSink& sink);
  absl::Status CheckPullSize(const PullSpec& spec);
  void Log(const std::string& msg) const {
    if (options_.log) {
      options_.log(msg);
    } else {
      std::fprintf(stderr, "ps shard %d: %s\n", options_.shard_index,
                   msg.c_str());
    }
  }
  void TimerLoop(absl::Duration tick) ABSL_LOCKS_EXCLUDED(timer_mu_);
  // The snapshot's chunks into the staged layout's chunks.
  absl::Status RestoreChunks(const ShardSnapshot& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(declare_mu_);
  // The snapshot's dedup rows this shard takes: rows of workers outside the
  // job dropped; InvalidArgument for a row larger than the shard allows.
  absl::Status CheckRestoredClaims(const std::vector<DedupEntry>& saved,
                                   std::vector<DedupEntry>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(declare_mu_);

  const ParameterStoreOptions options_;
  const std::unique_ptr<Optimizer> optimizer_;
  ShardMetrics metrics_;
  PushDedupTable dedup_;

  // The layout and the chunks are set under declare_mu_ (the layout when
  // first declared, the values chunk by chunk) and are immutable once
  // initialized_ (acquire) is true, which is when every chunk has values;
  // requests read them without the lock only after checking initialized_.
  absl::Mutex declare_mu_;
  std::atomic<bool> initialized_{false};
  // Set by Restore before initialized_. A restored shard accepts base versions
  // ahead of its own: workers computed from updates the snapshot lost
  // (async/ssp: staleness 0; sync: the shard adopts the step).
  std::atomic<bool> restored_{false};
  bool layout_published_ ABSL_GUARDED_BY(declare_mu_) = false;
  int64_t chunks_without_values_ ABSL_GUARDED_BY(declare_mu_) = 0;
  ModelLayout layout_;
  ShardMap map_;
  ShardChunks chunks_;

  // Created after the members it points into; destroyed (after the timer
  // is joined) before them.
  std::unique_ptr<StepPolicy> policy_;

  absl::Mutex timer_mu_;
  bool timer_stop_ ABSL_GUARDED_BY(timer_mu_) = false;
  std::thread timer_;
};

ParameterStoreImpl::ParameterStoreImpl(const ParameterStoreOptions& o,
                                       std::unique_ptr<Optimizer> opt)
    : options_(o), optimizer_(std::move(opt)) {
  StepContext ctx;
  ctx.options = &options_;
  ctx.optimizer = optimizer_.get();
  ctx.chunks = &chunks_;
  ctx.metrics = &metrics_;
  ctx.read = [this](const PullSpec& spec, const PullSink& sink) {
    return Read(spec, sink);
  };
  ctx.log = [this](const std::string& msg) { Log(msg); };
  policy_ = CreateStepPolicy(std::move(ctx));
  const absl::Duration tick = policy_->TickInterval();
  if (tick > absl::ZeroDuration()) {
    timer_ = std::thread([this, tick] { TimerLoop(tick); });
  }
}

ParameterStoreImpl::~ParameterStoreImpl() {
  Shutdown();
  if (timer_.joinable()) timer_.join();
}

void ParameterStoreImpl::Shutdown() {
  policy_->Shutdown();
  absl::MutexLock l(&timer_mu_);
  timer_stop_ = true;
}

void ParameterStoreImpl::TimerLoop(absl::Duration tick) {
  while (true) {
    {
      absl::MutexLock l(&timer_mu_);
      if (timer_mu_.AwaitWithTimeout(absl::Condition(&timer_stop_), tick)) {
        return;
      }
    }
    policy_->OnTick();
  }
}

absl::Status ParameterStoreImpl::CheckChunkBytes(const ChunkBytes& c,
                                                 const char* what) {
  const int idx = chunks_.LocalIndex(c.chunk_id);
  if (idx < 0) {
    return metrics_.Reject(
        "unknown_chunk",
        absl::InvalidArgumentError(absl::StrCat(
            what, ": chunk ", c.chunk_id, " is not held by shard ",
            options_.shard_index, " (it holds ", chunks_.size(), " chunks)")));
  }
  const Chunk& info = chunks_.at(idx).info();
  const std::string& tensor = layout_.tensors[info.tensor_index].name;
  if (c.num_bytes != info.num_elements * 4 || PiecesBytes(c) != c.num_bytes) {
    return metrics_.Reject(
        "wrong_size",
        absl::InvalidArgumentError(absl::StrCat(
            what, ": chunk ", c.chunk_id, " of tensor '", tensor, "' needs ",
            info.num_elements * 4, " bytes (", info.num_elements,
            " float32), got ", PiecesBytes(c))));
  }
  if (!AllFinite(c)) {
    return metrics_.Reject(
        "non_finite",
        absl::InvalidArgumentError(absl::StrCat(
            what, ": chunk ", c.chunk_id, " of tensor '", tensor,
            "' contains NaN or Inf; nothing was applied")));
  }
  return absl::OkStatus();
}

absl::Status ParameterStoreImpl::StageLayout(const ModelLayout& layout) {
  if (layout.num_shards != options_.num_shards) {
    return metrics_.Reject(
        "layout_mismatch",
        absl::InvalidArgumentError(absl::StrCat(
            "layout is cut for ", layout.num_shards,
            " shards but this server is shard ", options_.shard_index, " of ",
            options_.num_shards)));
  }
  // Checked against the limits before anything is built from it; a refusal
  // leaves nothing staged, so a valid layout may still be declared.
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout, options_.layout_limits);
  if (!map.ok()) return metrics_.Reject("bad_request", map.status());
  layout_ = layout;
  map_ = *std::move(map);
  chunks_ = ShardChunks::ForShard(map_, options_.shard_index);
  chunks_without_values_ = static_cast<int64_t>(chunks_.size());
  return absl::OkStatus();
}

void ParameterStoreImpl::UnstageLayout() {
  layout_ = ModelLayout();
  map_ = ShardMap();
  chunks_ = ShardChunks();
  chunks_without_values_ = 0;
}

absl::Status ParameterStoreImpl::CheckInitialValues(
    absl::Span<const ChunkBytes> initial) {
  std::vector<bool> seen(chunks_.size(), false);
  for (const ChunkBytes& c : initial) {
    DP_RETURN_IF_ERROR(CheckChunkBytes(c, "declare"));
    const int idx = chunks_.LocalIndex(c.chunk_id);
    if (seen[idx]) {
      return metrics_.Reject(
          "bad_request", absl::InvalidArgumentError(absl::StrCat(
                             "declare: chunk ", c.chunk_id, " given twice")));
    }
    seen[idx] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ParameterStoreImpl::Declare(
    const ModelLayout& layout, absl::Span<const ChunkBytes> initial) {
  absl::MutexLock lock(&declare_mu_);
  bool staged = false;
  if (layout_published_) {
    if (layout != layout_) {
      return metrics_.Reject(
          "layout_mismatch",
          absl::InvalidArgumentError(absl::StrCat(
              "declared layout differs from the one shard ",
              options_.shard_index, " already holds (declared vs held): ",
              LayoutDifference(layout, layout_))));
    }
  } else {
    // Stage the layout (CheckChunkBytes reads it); keep it only if this
    // call's values check out.
    DP_RETURN_IF_ERROR(StageLayout(layout));
    staged = true;
  }
  if (absl::Status s = CheckInitialValues(initial); !s.ok()) {
    if (staged) UnstageLayout();
    return s;
  }
  layout_published_ = true;
  const bool was_initialized = initialized_.load(std::memory_order_relaxed);
  for (const ChunkBytes& c : initial) {
    if (chunks_.at(chunks_.LocalIndex(c.chunk_id)).Initialize(c, *optimizer_)) {
      --chunks_without_values_;
    }
  }
  // Only the call that gives the last chunk its values initializes the
  // shard (DeclareModelResponse.initialized_now).
  const bool initialized_now = !was_initialized && chunks_without_values_ == 0;
  if (initialized_now) initialized_.store(true, std::memory_order_release);
  return initialized_now;
}

// A pull whose response the transport could not send is refused before it is
// read or counted.
absl::Status ParameterStoreImpl::CheckPullSize(const PullSpec& spec) {
  if (spec.max_response_bytes <= 0) return absl::OkStatus();
  int64_t bytes = 0;
  auto add = [&](const ChunkState& st) {
    bytes += st.info().num_elements * spec.value_bytes + kPullChunkOverheadBytes;
  };
  if (spec.chunk_ids.empty()) {
    for (size_t i = 0; i < chunks_.size(); ++i) add(chunks_.at(i));
  } else {
    for (int32_t id : spec.chunk_ids) {
      add(chunks_.at(chunks_.LocalIndex(id)));
      if (bytes > spec.max_response_bytes) break;  // No overflow on repeats.
    }
  }
  if (bytes <= spec.max_response_bytes) return absl::OkStatus();
  return metrics_.Reject(
      "too_large",
      absl::ResourceExhaustedError(absl::StrCat(
          "pull: the response would exceed the ", spec.max_response_bytes,
          "-byte message limit (", spec.chunk_ids.empty()
                                       ? static_cast<size_t>(chunks_.size())
                                       : spec.chunk_ids.size(),
          " chunks asked for); pull fewer chunks per call")));
}

absl::Status ParameterStoreImpl::Read(const PullSpec& spec,
                                      const PullSink& sink) {
  DP_RETURN_IF_ERROR(RequireInitialized("pull"));
  for (int32_t id : spec.chunk_ids) {
    if (chunks_.LocalIndex(id) < 0) {
      return metrics_.Reject(
          "unknown_chunk",
          absl::InvalidArgumentError(absl::StrCat(
              "pull: chunk ", id, " is not held by shard ",
              options_.shard_index)));
    }
  }
  DP_RETURN_IF_ERROR(CheckPullSize(spec));
  int64_t bytes = 0;
  auto read = [&](const ChunkState& st) {
    st.Read(sink);
    bytes += st.info().num_elements * 4;
  };
  if (spec.chunk_ids.empty()) {
    for (size_t i = 0; i < chunks_.size(); ++i) read(chunks_.at(i));
  } else {
    for (int32_t id : spec.chunk_ids) read(chunks_.at(chunks_.LocalIndex(id)));
  }
  metrics_.RecordPull(bytes);
  return absl::OkStatus();
}

void ParameterStoreImpl::PullWhenReady(PullSpec spec, PullSink sink,
                                       PullDone done) {
  policy_->PullWhenReady(std::move(spec), std::move(sink), std::move(done));
}

absl::Status ParameterStoreImpl::ValidatePush(
    const PushId& id, absl::Span<const ChunkBytes> grads) {
  DP_RETURN_IF_ERROR(RequireInitialized("push"));
  if (id.worker_id < 0 || id.seq < 1) {
    return metrics_.Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            "push needs worker_id >= 0 and seq >= 1, got worker_id ",
            id.worker_id, ", seq ", id.seq)));
  }
  // Each part carries at least one chunk, so a push has at most as many
  // parts as the shard has chunks: the dedup table's row of a worker stays
  // within the shard's size. (A shard that owns no chunk takes one empty
  // part.)
  const int64_t max_parts = std::max<int64_t>(1, chunks_.size());
  if (id.num_parts < 1 || id.num_parts > max_parts || id.part < 0 ||
      id.part >= id.num_parts) {
    return metrics_.Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            "push needs 0 <= part < num_parts <= ", max_parts,
            " (this shard's chunks), got part ", id.part, " of ",
            id.num_parts)));
  }
  if (grads.empty() && chunks_.size() > 0) {
    return metrics_.Reject(
        "bad_request", absl::InvalidArgumentError(
                           "push without gradients: every part carries at "
                           "least one of this shard's chunks"));
  }
  DP_RETURN_IF_ERROR(policy_->CheckPush(id, grads.size()));
  absl::flat_hash_set<int32_t> ids;
  for (const ChunkBytes& g : grads) {
    DP_RETURN_IF_ERROR(CheckChunkBytes(g, "push"));
    if (!ids.insert(g.chunk_id).second) {
      return metrics_.Reject(
          "bad_request", absl::InvalidArgumentError(absl::StrCat(
                             "push: chunk ", g.chunk_id,
                             " appears twice in one push")));
    }
    const int64_t version = chunks_.at(chunks_.LocalIndex(g.chunk_id)).version();
    const bool ahead_ok = restored_.load(std::memory_order_relaxed);
    if (g.base_version < 0 || (g.base_version > version && !ahead_ok)) {
      return metrics_.Reject(
          "bad_request",
          absl::InvalidArgumentError(absl::StrCat(
              "push: chunk ", g.chunk_id, " base_version ", g.base_version,
              " is not a version this shard served (current ", version,
              ")")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> ParameterStoreImpl::Push(
    const PushId& id, absl::Span<const ChunkBytes> grads) {
  // Validate everything before touching any chunk.
  DP_RETURN_IF_ERROR(ValidatePush(id, grads));
  // Claim (seq, part) for this worker: at most once.
  absl::StatusOr<PushClaim> claim = dedup_.Claim(id);
  if (!claim.ok()) {
    return metrics_.Reject(absl::IsFailedPrecondition(claim.status())
                               ? "replaced_incarnation"
                               : "bad_request",
                           claim.status());
  }
  if (claim->new_incarnation) {
    Log(absl::StrCat("worker ", id.worker_id, " restarted (incarnation ",
                     id.incarnation, "): its sequence starts again"));
  }
  if (claim->duplicate) {
    metrics_.RecordDuplicate();
    PushResult dup;
    dup.duplicate = true;
    return dup;
  }
  int64_t bytes = 0;
  for (const ChunkBytes& g : grads) bytes += g.num_bytes;
  metrics_.RecordPushBytes(bytes);
  return policy_->Apply(id, grads, claim->completes_push);
}

absl::Status ParameterStoreImpl::Leave(int32_t worker_id) {
  if (worker_id < 0) {
    return metrics_.Reject("bad_request",
                           absl::InvalidArgumentError(absl::StrCat(
                               "leave: bad worker_id ", worker_id)));
  }
  return policy_->Leave(worker_id);
}

absl::StatusOr<ShardSnapshot> ParameterStoreImpl::Save() const {
  if (!initialized_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError("snapshot before the model was declared");
  }
  ShardSnapshot s;
  s.layout = layout_;
  s.shard_index = options_.shard_index;
  s.num_shards = options_.num_shards;
  s.optimizer = optimizer_->name();
  s.mode = TrainModeName(options_.mode);
  s.created_unix_ms = absl::ToUnixMillis(absl::Now());
  std::vector<int64_t> versions;
  for (int attempt = 0;; ++attempt) {
    s.chunks.clear();
    versions.clear();
    for (size_t i = 0; i < chunks_.size(); ++i) {
      ChunkState::Saved v = chunks_.at(i).Save();
      versions.push_back(v.version);
      s.chunks.push_back({chunks_.at(i).info().id, v.version,
                          std::move(v.values), std::move(v.opt_state)});
    }
    // Updates applied while we copied may leave a copy the mode cannot
    // restore from (sync: chunks of two steps); copy again.
    if (policy_->IsSnapshotConsistent(versions) || attempt >= 1000) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  s.step = policy_->SnapshotStep(versions);
  s.dedup = dedup_.Export();  // After the chunks (see the header).
  s.clocks = policy_->SaveClocks();
  return s;
}

absl::Status ParameterStoreImpl::RestoreChunks(const ShardSnapshot& s) {
  if (s.chunks.size() != chunks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot has ", s.chunks.size(), " chunks, the layout gives shard ",
        options_.shard_index, " ", chunks_.size()));
  }
  const int64_t state = optimizer_->StateSize();
  for (const ChunkSnapshot& c : s.chunks) {
    const int idx = chunks_.LocalIndex(c.chunk_id);
    if (idx < 0 || c.values == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "snapshot chunk ", c.chunk_id, " is not one of this shard's"));
    }
    const int64_t n = chunks_.at(idx).info().num_elements;
    if (static_cast<int64_t>(c.values->size()) != n ||
        static_cast<int64_t>(c.opt_state.size()) != n * state ||
        c.version < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "snapshot chunk ", c.chunk_id, " has ", c.values->size(),
          " values and ", c.opt_state.size(), " optimizer floats, expected ",
          n, " and ", n * state));
    }
  }
  for (const ChunkSnapshot& c : s.chunks) {
    chunks_.at(chunks_.LocalIndex(c.chunk_id))
        .Restore(*c.values, c.opt_state, c.version);
  }
  return absl::OkStatus();
}

absl::Status ParameterStoreImpl::CheckRestoredClaims(
    const std::vector<DedupEntry>& saved, std::vector<DedupEntry>* out) const {
  const int64_t max_parts = std::max<int64_t>(1, chunks_.size());
  for (const DedupEntry& e : saved) {
    // A worker outside this job (a job restarted with fewer) pushes no more.
    if (options_.num_workers > 0 && e.worker_id >= options_.num_workers) continue;
    if (e.num_parts > max_parts ||
        e.retired.size() > PushDedupTable::kMaxRetired) {
      return absl::InvalidArgumentError(absl::StrCat(
          "snapshot dedup entry of worker ", e.worker_id, " has ",
          e.num_parts, " parts and ", e.retired.size(),
          " retired incarnations; at most ", max_parts, " and ",
          PushDedupTable::kMaxRetired));
    }
    out->push_back(e);
  }
  return absl::OkStatus();
}

absl::Status ParameterStoreImpl::Restore(const ShardSnapshot& s) {
  absl::MutexLock l(&declare_mu_);
  if (layout_published_ || initialized_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError("restore into a declared shard");
  }
  if (s.shard_index != options_.shard_index ||
      s.num_shards != options_.num_shards ||
      s.optimizer != optimizer_->name() ||
      s.mode != TrainModeName(options_.mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot of shard ", s.shard_index, " of ", s.num_shards, " (",
        s.optimizer, ", ", s.mode, ") does not fit shard ",
        options_.shard_index, " of ", options_.num_shards, " (",
        optimizer_->name(), ", ", TrainModeName(options_.mode), ")"));
  }
  DP_RETURN_IF_ERROR(CheckSnapshotValues(s));
  DP_RETURN_IF_ERROR(StageLayout(s.layout));
  absl::Status st = RestoreChunks(s);
  std::vector<DedupEntry> claims;
  if (st.ok()) st = CheckRestoredClaims(s.dedup, &claims);
  if (st.ok()) st = dedup_.Import(policy_->RestoredClaims(std::move(claims)));
  if (st.ok()) st = policy_->RestoreClocks(s.clocks);
  if (!st.ok()) {
    UnstageLayout();
    return st;
  }
  chunks_without_values_ = 0;
  layout_published_ = true;
  restored_.store(true, std::memory_order_relaxed);
  metrics_.RecordSnapshotRestored(s.created_unix_ms / 1000);
  initialized_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

ShardStats ParameterStoreImpl::Stats() const {
  ShardStats s;
  s.shard_index = options_.shard_index;
  s.num_shards = options_.num_shards;
  s.optimizer = optimizer_->name();
  s.mode = TrainModeName(options_.mode);
  s.initialized = initialized_.load(std::memory_order_acquire);
  if (s.initialized) {
    s.num_chunks = static_cast<int32_t>(chunks_.size());
    for (size_t i = 0; i < chunks_.size(); ++i) {
      s.num_elements += chunks_.at(i).info().num_elements;
      s.total_chunk_updates += chunks_.at(i).version();
    }
  }
  metrics_.FillStats(&s);
  policy_->FillStats(&s);
  return s;
}

}  // namespace

absl::Status ParameterStore::Pull(absl::Span<const int32_t> chunk_ids,
                                  const PullSink& sink) {
  PullSpec spec;
  spec.chunk_ids.assign(chunk_ids.begin(), chunk_ids.end());
  absl::Status out;
  // No wait is asked for, so `done` runs before PullWhenReady returns.
  PullWhenReady(std::move(spec), sink, [&out](absl::Status s) { out = s; });
  return out;
}

absl::StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Create(
    const ParameterStoreOptions& options) {
  DP_RETURN_IF_ERROR(ValidateStepPolicyOptions(options));
  DP_RETURN_IF_ERROR(ValidateLayoutLimits(options.layout_limits));
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 0 <= shard_index < num_shards, got shard_index ",
        options.shard_index, ", num_shards ", options.num_shards));
  }
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt,
                      CreateOptimizer(options.optimizer));
  return std::unique_ptr<ParameterStore>(
      new ParameterStoreImpl(options, std::move(opt)));
}

}  // namespace downpour
