#include "server/parameter_store.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

// Values, version and optimizer state of one chunk.
struct ChunkState {
  explicit ChunkState(const Chunk& c) : info(c) {}
  const Chunk info;
  mutable absl::Mutex mu;
  std::vector<float> values ABSL_GUARDED_BY(mu);
  std::vector<float> opt_state ABSL_GUARDED_BY(mu);
  // Written under mu; read without it for validation and stats.
  std::atomic<int64_t> version{0};
};

// Serializes the pushes of one worker so that the seq check and the apply are
// one atomic step; different workers never share it.
struct WorkerState {
  absl::Mutex mu;
  int64_t last_seq ABSL_GUARDED_BY(mu) = 0;
};

bool AllFinite(const float* p, int64_t n) {
  // Summing x - x is 0 for finite x and NaN for Inf/NaN: a branch-free pass.
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += p[i] - p[i];
  return acc == 0;
}

class ParameterStoreImpl final : public ParameterStore {
 public:
  ParameterStoreImpl(const ParameterStoreOptions& o,
                     std::unique_ptr<Optimizer> opt)
      : options_(o), optimizer_(std::move(opt)) {}

  absl::StatusOr<bool> Declare(const ModelLayout& layout,
                               absl::Span<const ChunkBytes> initial) override;
  absl::Status Pull(absl::Span<const int32_t> chunk_ids,
                    const std::function<void(const ChunkView&)>& sink) override;
  absl::StatusOr<PushResult> Push(int32_t worker_id, int64_t seq,
                                  absl::Span<const ChunkBytes> grads) override;
  ShardStats Stats() const override;
  absl::StatusOr<ShardMap> shard_map() const override {
    if (!initialized_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError("model not declared yet");
    }
    return map_;
  }

 private:
  absl::Status Reject(const std::string& reason, absl::Status s) const {
    absl::MutexLock l(&stats_mu_);
    ++rejected_[reason];
    return s;
  }
  absl::Status RequireInitialized(const char* what) const {
    if (initialized_.load(std::memory_order_acquire)) return absl::OkStatus();
    return Reject("not_initialized",
                  absl::FailedPreconditionError(absl::StrCat(
                      what, " before the model was declared on shard ",
                      options_.shard_index)));
  }
  // Index into chunks_ of an owned chunk id, or -1.
  int LocalIndex(int32_t chunk_id) const {
    if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(local_index_.size())) {
      return -1;
    }
    return local_index_[chunk_id];
  }
  absl::Status CheckChunkBytes(const ChunkBytes& c, const char* what) const;
  WorkerState* GetWorker(int32_t worker_id);

  const ParameterStoreOptions options_;
  const std::unique_ptr<Optimizer> optimizer_;

  // Set once under declare_mu_, then immutable; readers check initialized_
  // (acquire) first.
  absl::Mutex declare_mu_;
  std::atomic<bool> initialized_{false};
  ModelLayout layout_;
  ShardMap map_;
  std::vector<std::unique_ptr<ChunkState>> chunks_;
  std::vector<int> local_index_;  // chunk id -> index in chunks_, or -1

  absl::Mutex workers_mu_;
  std::map<int32_t, std::unique_ptr<WorkerState>> workers_
      ABSL_GUARDED_BY(workers_mu_);

  std::atomic<int64_t> pulls_{0}, pushes_applied_{0}, pushes_duplicate_{0};
  std::atomic<int64_t> bytes_pulled_{0}, bytes_pushed_{0};
  std::atomic<int64_t> staleness_sum_{0}, staleness_count_{0};
  std::atomic<int64_t> staleness_max_{0};
  mutable absl::Mutex stats_mu_;
  mutable std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(stats_mu_);
};

absl::Status ParameterStoreImpl::CheckChunkBytes(const ChunkBytes& c,
                                                 const char* what) const {
  const int idx = LocalIndex(c.chunk_id);
  if (idx < 0) {
    return Reject("unknown_chunk",
                  absl::InvalidArgumentError(absl::StrCat(
                      what, ": chunk ", c.chunk_id, " is not held by shard ",
                      options_.shard_index, " (it holds ", chunks_.size(),
                      " chunks)")));
  }
  const Chunk& info = chunks_[idx]->info;
  if (c.num_bytes != info.num_elements * 4) {
    return Reject("wrong_size",
                  absl::InvalidArgumentError(absl::StrCat(
                      what, ": chunk ", c.chunk_id, " of tensor '",
                      layout_.tensors[info.tensor_index].name, "' needs ",
                      info.num_elements * 4, " bytes (", info.num_elements,
                      " float32), got ", c.num_bytes)));
  }
  if (!AllFinite(static_cast<const float*>(c.data), info.num_elements)) {
    return Reject("non_finite",
                  absl::InvalidArgumentError(absl::StrCat(
                      what, ": chunk ", c.chunk_id, " of tensor '",
                      layout_.tensors[info.tensor_index].name,
                      "' contains NaN or Inf; nothing was applied")));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ParameterStoreImpl::Declare(
    const ModelLayout& layout, absl::Span<const ChunkBytes> initial) {
  absl::MutexLock lock(&declare_mu_);
  if (initialized_.load(std::memory_order_acquire)) {
    if (layout != layout_) {
      return Reject("layout_mismatch",
                    absl::InvalidArgumentError(absl::StrCat(
                        "declared layout (", layout.tensors.size(),
                        " tensors, ", layout.NumElements(), " floats, ",
                        layout.num_shards, " shards) differs from the one "
                        "shard ", options_.shard_index, " already holds (",
                        layout_.tensors.size(), " tensors, ",
                        layout_.NumElements(), " floats, ",
                        layout_.num_shards, " shards)")));
    }
    return false;
  }
  if (layout.num_shards != options_.num_shards) {
    return Reject("layout_mismatch",
                  absl::InvalidArgumentError(absl::StrCat(
                      "layout is cut for ", layout.num_shards,
                      " shards but this server is shard ", options_.shard_index,
                      " of ", options_.num_shards)));
  }
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  if (!map.ok()) return Reject("bad_request", map.status());

  // Build the new state aside; publish only when everything checked out.
  std::vector<std::unique_ptr<ChunkState>> chunks;
  std::vector<int> local_index(map->chunks.size(), -1);
  for (int32_t id : map->shard_chunks[options_.shard_index]) {
    local_index[id] = static_cast<int>(chunks.size());
    chunks.push_back(std::make_unique<ChunkState>(map->chunks[id]));
  }
  // CheckChunkBytes reads layout_/chunks_/local_index_; stage them first.
  layout_ = layout;
  map_ = *map;
  chunks_ = std::move(chunks);
  local_index_ = std::move(local_index);
  auto unstage = [&](absl::Status s) {
    layout_ = ModelLayout();
    map_ = ShardMap();
    chunks_.clear();
    local_index_.clear();
    return s;
  };
  if (initial.size() != chunks_.size()) {
    return unstage(Reject(
        "bad_request",
        absl::InvalidArgumentError(absl::StrCat(
            "initial values must cover the ", chunks_.size(),
            " chunks of shard ", options_.shard_index, ", got ",
            initial.size()))));
  }
  std::vector<bool> seen(chunks_.size(), false);
  for (const ChunkBytes& c : initial) {
    if (absl::Status s = CheckChunkBytes(c, "declare"); !s.ok()) {
      return unstage(s);
    }
    const int idx = LocalIndex(c.chunk_id);
    if (seen[idx]) {
      return unstage(Reject("bad_request", absl::InvalidArgumentError(absl::StrCat(
                                               "declare: chunk ", c.chunk_id,
                                               " given twice"))));
    }
    seen[idx] = true;
  }
  for (const ChunkBytes& c : initial) {
    ChunkState& st = *chunks_[LocalIndex(c.chunk_id)];
    absl::MutexLock l(&st.mu);
    st.values.resize(st.info.num_elements);
    if (c.num_bytes > 0) std::memcpy(st.values.data(), c.data, c.num_bytes);
    st.opt_state.assign(st.info.num_elements * optimizer_->StateSize(),
                        optimizer_->InitialState());
  }
  initialized_.store(true, std::memory_order_release);
  return true;
}

absl::Status ParameterStoreImpl::Pull(
    absl::Span<const int32_t> chunk_ids,
    const std::function<void(const ChunkView&)>& sink) {
  DP_RETURN_IF_ERROR(RequireInitialized("pull"));
  for (int32_t id : chunk_ids) {
    if (LocalIndex(id) < 0) {
      return Reject("unknown_chunk",
                    absl::InvalidArgumentError(absl::StrCat(
                        "pull: chunk ", id, " is not held by shard ",
                        options_.shard_index)));
    }
  }
  int64_t bytes = 0;
  auto read = [&](const ChunkState& st) {
    absl::MutexLock l(&st.mu);
    sink(ChunkView{st.info.id, st.version.load(std::memory_order_relaxed),
                   st.values.data(), st.info.num_elements});
    bytes += st.info.num_elements * 4;
  };
  if (chunk_ids.empty()) {
    for (const auto& st : chunks_) read(*st);
  } else {
    for (int32_t id : chunk_ids) read(*chunks_[LocalIndex(id)]);
  }
  pulls_.fetch_add(1, std::memory_order_relaxed);
  bytes_pulled_.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

WorkerState* ParameterStoreImpl::GetWorker(int32_t worker_id) {
  absl::MutexLock l(&workers_mu_);
  std::unique_ptr<WorkerState>& w = workers_[worker_id];
  if (w == nullptr) w = std::make_unique<WorkerState>();
  return w.get();
}

absl::StatusOr<PushResult> ParameterStoreImpl::Push(
    int32_t worker_id, int64_t seq, absl::Span<const ChunkBytes> grads) {
  DP_RETURN_IF_ERROR(RequireInitialized("push"));
  if (worker_id < 0 || seq < 1) {
    return Reject("bad_request",
                  absl::InvalidArgumentError(absl::StrCat(
                      "push needs worker_id >= 0 and seq >= 1, got worker_id ",
                      worker_id, ", seq ", seq)));
  }
  // Validate everything before touching any chunk.
  absl::flat_hash_set<int32_t> ids;
  int64_t bytes = 0;
  for (const ChunkBytes& g : grads) {
    DP_RETURN_IF_ERROR(CheckChunkBytes(g, "push"));
    if (!ids.insert(g.chunk_id).second) {
      return Reject("bad_request", absl::InvalidArgumentError(absl::StrCat(
                                       "push: chunk ", g.chunk_id,
                                       " appears twice in one push")));
    }
    const ChunkState& st = *chunks_[LocalIndex(g.chunk_id)];
    if (g.base_version < 0 ||
        g.base_version > st.version.load(std::memory_order_relaxed)) {
      return Reject("bad_request",
                    absl::InvalidArgumentError(absl::StrCat(
                        "push: chunk ", g.chunk_id, " base_version ",
                        g.base_version, " is not a version this shard served "
                        "(current ", st.version.load(), ")")));
    }
    bytes += g.num_bytes;
  }

  WorkerState* worker = GetWorker(worker_id);
  absl::MutexLock wl(&worker->mu);
  PushResult result;
  if (seq <= worker->last_seq) {
    pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
    result.duplicate = true;
    return result;
  }
  result.versions.reserve(grads.size());
  for (const ChunkBytes& g : grads) {
    ChunkState& st = *chunks_[LocalIndex(g.chunk_id)];
    absl::MutexLock l(&st.mu);
    const int64_t version = st.version.load(std::memory_order_relaxed);
    const int64_t staleness = version - g.base_version;
    optimizer_->Apply(st.info.num_elements, static_cast<const float*>(g.data),
                      1.0f, st.values.data(), st.opt_state.data());
    st.version.store(version + 1, std::memory_order_relaxed);
    result.versions.push_back(version + 1);
    staleness_sum_.fetch_add(staleness, std::memory_order_relaxed);
    staleness_count_.fetch_add(1, std::memory_order_relaxed);
    int64_t prev = staleness_max_.load(std::memory_order_relaxed);
    while (staleness > prev &&
           !staleness_max_.compare_exchange_weak(prev, staleness)) {
    }
  }
  worker->last_seq = seq;
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  bytes_pushed_.fetch_add(bytes, std::memory_order_relaxed);
  return result;
}

ShardStats ParameterStoreImpl::Stats() const {
  ShardStats s;
  s.shard_index = options_.shard_index;
  s.num_shards = options_.num_shards;
  s.optimizer = optimizer_->name();
  s.initialized = initialized_.load(std::memory_order_acquire);
  if (s.initialized) {
    s.num_chunks = static_cast<int32_t>(chunks_.size());
    for (const auto& st : chunks_) {
      s.num_elements += st->info.num_elements;
      s.total_chunk_updates += st->version.load(std::memory_order_relaxed);
    }
  }
  s.pulls = pulls_.load();
  s.pushes_applied = pushes_applied_.load();
  s.pushes_duplicate = pushes_duplicate_.load();
  s.bytes_pulled = bytes_pulled_.load();
  s.bytes_pushed = bytes_pushed_.load();
  const int64_t n = staleness_count_.load();
  s.staleness_mean = n == 0 ? 0.0 : static_cast<double>(staleness_sum_.load()) / n;
  s.staleness_max = staleness_max_.load();
  absl::MutexLock l(&stats_mu_);
  s.rejected = rejected_;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Create(
    const ParameterStoreOptions& options) {
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
