#include "server/parameter_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <limits>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

using ValuesBuffer = std::vector<float>;

// Values, version and optimizer state of one chunk.
//
// Values are copy-on-write: a pull takes a reference to the current buffer
// (no copy, the lock is held only for that), and a push writes in place when
// no reader holds the buffer, else into a spare buffer that then becomes
// current. Once a push has overlapped a pull of a chunk, the chunk keeps its
// spare for reuse (no allocation or page faults on later overlaps): a busy
// shard holds up to twice its values in memory, plus buffers that slow
// readers still hold.
struct ChunkState {
  explicit ChunkState(const Chunk& c) : info(c) {}
  const Chunk info;
  mutable absl::Mutex mu;
  std::shared_ptr<ValuesBuffer> values ABSL_GUARDED_BY(mu);
  // A retired buffer kept for the next copy-on-write (may still be read).
  std::shared_ptr<ValuesBuffer> spare ABSL_GUARDED_BY(mu);
  std::vector<float> opt_state ABSL_GUARDED_BY(mu);

  // The current values, writable: copies them first if a reader holds them.
  float* MutableValues() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (Unshared(values)) return values->data();
    std::shared_ptr<ValuesBuffer> next;
    if (spare != nullptr && Unshared(spare)) {
      next = std::move(spare);
    } else {
      next = std::make_shared<ValuesBuffer>(values->size());
    }
    std::memcpy(next->data(), values->data(), values->size() * sizeof(float));
    spare = std::move(values);
    values = std::move(next);
    return values->data();
  }
  // True when no reader holds `buf`, so it may be written. New references
  // are only taken under mu, so a count of 1 stays 1; the fence orders the
  // last reader's reads (its release decrement) before our writes.
  static bool Unshared(const std::shared_ptr<ValuesBuffer>& buf) {
    if (buf.use_count() != 1) return false;
    std::atomic_thread_fence(std::memory_order_acquire);
    return true;
  }

  // Set once when initial values arrive (under the store's declare_mu_).
  bool has_values = false;
  // Written under mu; read without it for validation and stats.
  std::atomic<int64_t> version{0};
};

// Which parts of its latest push (seq) a worker has delivered. Claiming a
// part and applying it are not one atomic step: a retry of a part that is
// still being applied is acknowledged as a duplicate at once.
struct WorkerState {
  absl::Mutex mu;
  int64_t seq ABSL_GUARDED_BY(mu) = 0;
  int32_t num_parts ABSL_GUARDED_BY(mu) = 1;
  int32_t parts_done ABSL_GUARDED_BY(mu) = 0;
  std::vector<bool> parts ABSL_GUARDED_BY(mu);
};

// True when no value is Inf or NaN (exponent bits all ones). Counting with
// integer compares lets the compiler vectorize the pass, unlike a float
// reduction, so validation runs at memory speed. Any alignment.
bool AllFinite(const char* p, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + 4 * i, sizeof u);
    bad += (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

// Calls fn(bytes, count, first) for consecutive runs of whole float32 values
// of `c`, in order: `count` values at `bytes` (any alignment), the first of
// which is value number `first` of the chunk. A value straddling two pieces
// is assembled and passed as a run of one. `c.num_bytes` must be a multiple
// of 4 and equal to the pieces' total.
template <typename Fn>
void ForEachRun(const ChunkBytes& c, Fn&& fn) {
  if (c.pieces.empty()) {
    if (c.num_bytes >= 4) {
      fn(static_cast<const char*>(c.data), c.num_bytes / 4, int64_t{0});
    }
    return;
  }
  int64_t done = 0;  // Values passed so far.
  char partial[4];
  int have = 0;      // Bytes of a straddling value gathered in `partial`.
  for (absl::string_view piece : c.pieces) {
    if (piece.empty()) continue;
    const char* p = piece.data();
    int64_t left = static_cast<int64_t>(piece.size());
    if (have > 0) {
      const int take = static_cast<int>(std::min<int64_t>(4 - have, left));
      std::memcpy(partial + have, p, take);
      have += take;
      p += take;
      left -= take;
      if (have < 4) continue;
      fn(static_cast<const char*>(partial), int64_t{1}, done);
      ++done;
      have = 0;
    }
    const int64_t whole = left / 4;
    if (whole > 0) fn(p, whole, done);
    done += whole;
    have = static_cast<int>(left - whole * 4);
    std::memcpy(partial, p + whole * 4, have);
  }
}

// Copies the values of `c` to dst[0 .. c.num_bytes / 4).
void CopyValues(const ChunkBytes& c, float* dst) {
  ForEachRun(c, [&](const char* p, int64_t n, int64_t first) {
    std::memcpy(dst + first, p, static_cast<size_t>(n) * 4);
  });
}

int64_t PiecesBytes(const ChunkBytes& c) {
  if (c.pieces.empty()) return c.num_bytes;
  int64_t total = 0;
  for (absl::string_view piece : c.pieces) total += piece.size();
  return total;
}

// Sync mode: one worker's gradient for the current step, as its parts come.
struct PendingGrad {
  int64_t seq = 0;
  int32_t num_parts = 1;
  int32_t parts_in = 0;
  int64_t chunks_in = 0;
  std::vector<bool> have;    // By local chunk index.
  std::vector<float> grad;   // The shard's chunks concatenated, local order.
  bool complete() const { return parts_in == num_parts; }
};

// Counts of applied-update staleness: exact up to kBuckets - 2, the last
// bucket holds everything above.
class StalenessHistogram {
 public:
  void Add(int64_t s) {
    counts_[std::min<int64_t>(std::max<int64_t>(s, 0), kBuckets - 1)]
        .fetch_add(1, std::memory_order_relaxed);
  }
  // Smallest staleness with at least q of the mass at or below it.
  int64_t Quantile(double q) const {
    int64_t total = 0;
    for (const auto& c : counts_) total += c.load(std::memory_order_relaxed);
    if (total == 0) return 0;
    const int64_t target = static_cast<int64_t>(std::ceil(q * total));
    int64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i].load(std::memory_order_relaxed);
      if (seen >= std::max<int64_t>(target, 1)) return i;
    }
    return kBuckets - 1;
  }

 private:
  static constexpr int kBuckets = 1025;
  std::array<std::atomic<int64_t>, kBuckets> counts_{};
};

// A pull waiting for a sync step or for the ssp bound.
struct Waiter {
  PullSpec spec;
  std::function<void(const ChunkView&)> sink;
  std::function<void(absl::Status)> done;
  absl::Time since;
};

class ParameterStoreImpl final : public ParameterStore {
 public:
  ParameterStoreImpl(const ParameterStoreOptions& o,
                     std::unique_ptr<Optimizer> opt)
      : options_(o), optimizer_(std::move(opt)) {
    active_.assign(std::max(o.num_workers, 0), true);
    clock_.assign(std::max(o.num_workers, 0), 0);
    if (o.mode != TrainMode::kAsync) {
      timer_ = std::thread([this] { TimerLoop(); });
    }
  }
  ~ParameterStoreImpl() override {
    Shutdown();
    if (timer_.joinable()) timer_.join();
  }

  void Shutdown() override {
    std::list<Waiter> left;
    {
      absl::MutexLock l(&coord_mu_);
      stopping_ = true;
      left.swap(waiters_);
    }
    for (Waiter& w : left) w.done(absl::CancelledError("server shutting down"));
  }

  absl::StatusOr<bool> Declare(const ModelLayout& layout,
                               absl::Span<const ChunkBytes> initial) override;
  void PullWhenReady(PullSpec spec, std::function<void(const ChunkView&)> sink,
                     std::function<void(absl::Status)> done) override;
  absl::StatusOr<PushResult> Push(const PushId& id,
                                  absl::Span<const ChunkBytes> grads) override;
  absl::Status Leave(int32_t worker_id) override;
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
                      what, " before the model was (fully) declared on shard ",
                      options_.shard_index)));
  }
  // Sync: workers whose gradient for this step has all its parts.
  int CompleteCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_) {
    int n = 0;
    for (const auto& [w, p] : pending_) n += p.complete() ? 1 : 0;
    return n;
  }
  absl::StatusOr<PushResult> PushSync(const PushId& id,
                                      absl::Span<const ChunkBytes> grads,
                                      bool completes_push);
  // Index into chunks_ of an owned chunk id, or -1.
  int LocalIndex(int32_t chunk_id) const {
    if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(local_index_.size())) {
      return -1;
    }
    return local_index_[chunk_id];
  }
  absl::Status CheckChunkBytes(const ChunkBytes& c, const char* what) const;
  WorkerState* GetWorker(int32_t worker_id);
  // Validates ids and reads the chunks of `spec` into `sink`.
  absl::Status Read(const PullSpec& spec,
                    const std::function<void(const ChunkView&)>& sink);
  void Log(const std::string& msg) const {
    if (options_.log) {
      options_.log(msg);
    } else {
      std::fprintf(stderr, "ps shard %d: %s\n", options_.shard_index, msg.c_str());
    }
  }

  // ---- Sync / ssp coordination (all under coord_mu_) ----
  void ApplyToChunk(ChunkState& st, const ChunkBytes& grad, bool* dropped);
  // Counts one applied chunk update of the given staleness in the stats.
  void RecordStaleness(int64_t staleness);
  bool Ready(const PullSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  int64_t MinActiveClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  // Ssp: remembers how far ahead of the slowest worker a pull was answered.
  void RecordLead(const PullSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  int ActiveCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  int StepTarget() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  // Applies the mean of the pending gradients as step step_ -> step_ + 1.
  void CompleteStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  // Completes the sync step if enough gradients are pending.
  void MaybeCompleteStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  // Moves waiters that can be answered now (or must fail) into *out.
  void TakeReadyWaiters(std::list<Waiter>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  void Evict(const std::vector<int32_t>& workers, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_);
  void AnswerWaiters(std::list<Waiter>* ready);
  absl::Status AbortedStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(coord_mu_) {
    return absl::AbortedError(aborted_);
  }
  void TimerLoop();

  const ParameterStoreOptions options_;
  const std::unique_ptr<Optimizer> optimizer_;

  // Set once under declare_mu_ (the layout when first declared, the values
  // chunk by chunk), then immutable; readers check initialized_ (acquire),
  // which turns true once every chunk has values.
  absl::Mutex declare_mu_;
  std::atomic<bool> initialized_{false};
  bool layout_published_ = false;
  int64_t chunks_without_values_ = 0;
  ModelLayout layout_;
  ShardMap map_;
  std::vector<std::unique_ptr<ChunkState>> chunks_;
  std::vector<int> local_index_;  // chunk id -> index in chunks_, or -1
  // Offset of each local chunk in the shard's concatenation, and its size.
  std::vector<int64_t> shard_offset_;
  int64_t shard_elements_ = 0;

  absl::Mutex workers_mu_;
  std::map<int32_t, std::unique_ptr<WorkerState>> workers_
      ABSL_GUARDED_BY(workers_mu_);

  std::atomic<int64_t> pulls_{0}, pushes_applied_{0}, pushes_duplicate_{0};
  std::atomic<int64_t> bytes_pulled_{0}, bytes_pushed_{0};
  std::atomic<int64_t> staleness_sum_{0}, staleness_count_{0};
  std::atomic<int64_t> staleness_max_{0};
  std::atomic<int64_t> dropped_stale_{0};
  StalenessHistogram staleness_hist_;
  mutable absl::Mutex stats_mu_;
  mutable std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(stats_mu_);

  mutable absl::Mutex coord_mu_;
  bool stopping_ ABSL_GUARDED_BY(coord_mu_) = false;
  int64_t step_ ABSL_GUARDED_BY(coord_mu_) = 0;
  // Sync: gradients for step_ by worker id (ordered: deterministic sums),
  // each the shard's chunks concatenated in local order.
  std::map<int32_t, PendingGrad> pending_ ABSL_GUARDED_BY(coord_mu_);
  absl::Time pending_since_ ABSL_GUARDED_BY(coord_mu_);
  std::vector<bool> active_ ABSL_GUARDED_BY(coord_mu_);
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(coord_mu_);
  int64_t ssp_max_lead_ ABSL_GUARDED_BY(coord_mu_) = 0;
  std::vector<int32_t> evicted_ ABSL_GUARDED_BY(coord_mu_);
  std::string aborted_ ABSL_GUARDED_BY(coord_mu_);
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(coord_mu_);
  std::thread timer_;
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
  if (c.num_bytes != info.num_elements * 4 || PiecesBytes(c) != c.num_bytes) {
    return Reject("wrong_size",
                  absl::InvalidArgumentError(absl::StrCat(
                      what, ": chunk ", c.chunk_id, " of tensor '",
                      layout_.tensors[info.tensor_index].name, "' needs ",
                      info.num_elements * 4, " bytes (", info.num_elements,
                      " float32), got ", PiecesBytes(c))));
  }
  bool finite = true;
  ForEachRun(c, [&](const char* p, int64_t n, int64_t) {
    finite = finite && AllFinite(p, n);
  });
  if (!finite) {
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
  bool staged = false;
  if (layout_published_) {
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
  } else {
    if (layout.num_shards != options_.num_shards) {
      return Reject("layout_mismatch",
                    absl::InvalidArgumentError(absl::StrCat(
                        "layout is cut for ", layout.num_shards,
                        " shards but this server is shard ",
                        options_.shard_index, " of ", options_.num_shards)));
    }
    absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
    if (!map.ok()) return Reject("bad_request", map.status());
    // Stage the layout (CheckChunkBytes reads it); keep it only if this
    // call's values check out.
    std::vector<std::unique_ptr<ChunkState>> chunks;
    std::vector<int> local_index(map->chunks.size(), -1);
    for (int32_t id : map->shard_chunks[options_.shard_index]) {
      local_index[id] = static_cast<int>(chunks.size());
      chunks.push_back(std::make_unique<ChunkState>(map->chunks[id]));
    }
    layout_ = layout;
    map_ = *map;
    chunks_ = std::move(chunks);
    local_index_ = std::move(local_index);
    shard_offset_.clear();
    shard_elements_ = 0;
    for (const auto& st : chunks_) {
      shard_offset_.push_back(shard_elements_);
      shard_elements_ += st->info.num_elements;
    }
    chunks_without_values_ = static_cast<int64_t>(chunks_.size());
    staged = true;
  }
  auto fail = [&](absl::Status s) {
    if (staged) {
      layout_ = ModelLayout();
      map_ = ShardMap();
      chunks_.clear();
      local_index_.clear();
      shard_offset_.clear();
      shard_elements_ = 0;
      chunks_without_values_ = 0;
    }
    return s;
  };
  std::vector<bool> seen(chunks_.size(), false);
  for (const ChunkBytes& c : initial) {
    if (absl::Status s = CheckChunkBytes(c, "declare"); !s.ok()) return fail(s);
    const int idx = LocalIndex(c.chunk_id);
    if (seen[idx]) {
      return fail(Reject("bad_request", absl::InvalidArgumentError(absl::StrCat(
                                            "declare: chunk ", c.chunk_id,
                                            " given twice"))));
    }
    seen[idx] = true;
  }
  layout_published_ = true;
  bool set_any = false;
  for (const ChunkBytes& c : initial) {
    ChunkState& st = *chunks_[LocalIndex(c.chunk_id)];
    if (st.has_values) continue;
    absl::MutexLock l(&st.mu);
    st.values = std::make_shared<ValuesBuffer>(st.info.num_elements);
    CopyValues(c, st.values->data());
    st.opt_state.assign(st.info.num_elements * optimizer_->StateSize(),
                        optimizer_->InitialState());
    st.has_values = true;
    --chunks_without_values_;
    set_any = true;
  }
  if (chunks_without_values_ == 0) {
    initialized_.store(true, std::memory_order_release);
  }
  return set_any;
}

absl::Status ParameterStoreImpl::Read(
    const PullSpec& spec, const std::function<void(const ChunkView&)>& sink) {
  DP_RETURN_IF_ERROR(RequireInitialized("pull"));
  for (int32_t id : spec.chunk_ids) {
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
                   st.values->data(), st.info.num_elements, st.values});
    bytes += st.info.num_elements * 4;
  };
  if (spec.chunk_ids.empty()) {
    for (const auto& st : chunks_) read(*st);
  } else {
    for (int32_t id : spec.chunk_ids) read(*chunks_[LocalIndex(id)]);
  }
  pulls_.fetch_add(1, std::memory_order_relaxed);
  bytes_pulled_.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

void ParameterStoreImpl::PullWhenReady(
    PullSpec spec, std::function<void(const ChunkView&)> sink,
    std::function<void(absl::Status)> done) {
  if (options_.mode != TrainMode::kAsync &&
      (spec.min_version > 0 || spec.worker_clock >= 0)) {
    absl::Status abort;
    {
      absl::MutexLock l(&coord_mu_);
      if (!Ready(spec)) {
        waiters_.push_back({std::move(spec), std::move(sink), std::move(done),
                            absl::Now()});
        return;
      }
      RecordLead(spec);
      if (!aborted_.empty()) abort = AbortedStatus();
    }
    if (!abort.ok()) {
      done(abort);
      return;
    }
  }
  done(Read(spec, sink));
}

WorkerState* ParameterStoreImpl::GetWorker(int32_t worker_id) {
  absl::MutexLock l(&workers_mu_);
  std::unique_ptr<WorkerState>& w = workers_[worker_id];
  if (w == nullptr) w = std::make_unique<WorkerState>();
  return w.get();
}

absl::StatusOr<PushResult> ParameterStoreImpl::Push(
    const PushId& id, absl::Span<const ChunkBytes> grads) {
  DP_RETURN_IF_ERROR(RequireInitialized("push"));
  const int32_t worker_id = id.worker_id;
  if (worker_id < 0 || id.seq < 1) {
    return Reject("bad_request",
                  absl::InvalidArgumentError(absl::StrCat(
                      "push needs worker_id >= 0 and seq >= 1, got worker_id ",
                      worker_id, ", seq ", id.seq)));
  }
  if (id.num_parts < 1 || id.num_parts > (1 << 20) || id.part < 0 ||
      id.part >= id.num_parts) {
    return Reject("bad_request",
                  absl::InvalidArgumentError(absl::StrCat(
                      "push needs 0 <= part < num_parts <= 2^20, got part ",
                      id.part, " of ", id.num_parts)));
  }
  if (options_.mode != TrainMode::kAsync && worker_id >= options_.num_workers) {
    return Reject("bad_request",
                  absl::InvalidArgumentError(absl::StrCat(
                      "push: worker_id ", worker_id, " is not below the job's ",
                      options_.num_workers, " workers")));
  }
  if (options_.mode == TrainMode::kSync && id.num_parts == 1 &&
      grads.size() != chunks_.size()) {
    return Reject("bad_request",
                  absl::InvalidArgumentError(absl::StrCat(
                      "push: sync mode needs all ", chunks_.size(),
                      " chunks of shard ", options_.shard_index,
                      " in one push, got ", grads.size())));
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

  // Claim (seq, part) for this worker: at most once.
  bool completes_push = false;
  {
    WorkerState* worker = GetWorker(worker_id);
    absl::MutexLock wl(&worker->mu);
    if (id.seq < worker->seq ||
        (id.seq == worker->seq && worker->parts[id.part])) {
      pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
      PushResult dup;
      dup.duplicate = true;
      return dup;
    }
    if (id.seq == worker->seq && id.num_parts != worker->num_parts) {
      return Reject("bad_request",
                    absl::InvalidArgumentError(absl::StrCat(
                        "push seq ", id.seq, " part ", id.part, " says ",
                        id.num_parts, " parts, an earlier part said ",
                        worker->num_parts)));
    }
    if (id.seq > worker->seq) {
      worker->seq = id.seq;
      worker->num_parts = id.num_parts;
      worker->parts_done = 0;
      worker->parts.assign(id.num_parts, false);
    }
    worker->parts[id.part] = true;
    completes_push = ++worker->parts_done == worker->num_parts;
  }
  bytes_pushed_.fetch_add(bytes, std::memory_order_relaxed);

  if (options_.mode == TrainMode::kSync) {
    return PushSync(id, grads, completes_push);
  }

  PushResult result;
  if (options_.mode == TrainMode::kSsp) {
    absl::MutexLock cl(&coord_mu_);
    if (!aborted_.empty()) return AbortedStatus();
  }
  result.versions.reserve(grads.size());
  for (const ChunkBytes& g : grads) {
    ChunkState& st = *chunks_[LocalIndex(g.chunk_id)];
    ApplyToChunk(st, g, &result.dropped);
    result.versions.push_back(st.version.load(std::memory_order_relaxed));
  }
  if (result.dropped) dropped_stale_.fetch_add(1, std::memory_order_relaxed);
  if (!completes_push) return result;
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  if (options_.mode == TrainMode::kSsp) {
    std::list<Waiter> ready;
    {
      absl::MutexLock cl(&coord_mu_);
      ++clock_[worker_id];
      if (!active_[worker_id]) {
        active_[worker_id] = true;
        Log(absl::StrCat("worker ", worker_id, " is back at clock ",
                         clock_[worker_id]));
      }
      TakeReadyWaiters(&ready);
    }
    AnswerWaiters(&ready);
  }
  return result;
}

absl::StatusOr<PushResult> ParameterStoreImpl::PushSync(
    const PushId& id, absl::Span<const ChunkBytes> grads,
    bool completes_push) {
  const int32_t worker_id = id.worker_id;
  PushResult result;
  std::list<Waiter> ready;
  absl::Status error;
  {
    absl::MutexLock cl(&coord_mu_);
    if (!aborted_.empty()) return AbortedStatus();
    int64_t base = std::numeric_limits<int64_t>::max();
    for (const ChunkBytes& g : grads) base = std::min(base, g.base_version);
    auto it = pending_.find(worker_id);
    if (base < step_ || (it != pending_.end() && it->second.seq != id.seq)) {
      // Computed from an older step, or a second gradient for this step.
      dropped_stale_.fetch_add(1, std::memory_order_relaxed);
      result.dropped = true;
      return result;
    }
    if (!active_[worker_id]) {
      active_[worker_id] = true;
      Log(absl::StrCat("worker ", worker_id, " is back at step ", step_));
    }
    if (it == pending_.end()) {
      if (pending_.empty()) pending_since_ = absl::Now();
      it = pending_.emplace(worker_id, PendingGrad()).first;
      it->second.seq = id.seq;
      it->second.num_parts = id.num_parts;
      it->second.have.assign(chunks_.size(), false);
      it->second.grad.resize(shard_elements_);
    }
    PendingGrad& p = it->second;
    for (const ChunkBytes& g : grads) {
      const int idx = LocalIndex(g.chunk_id);
      if (p.have[idx]) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "push: chunk ", g.chunk_id, " sent in two parts of seq ", id.seq));
        break;
      }
    }
    if (error.ok()) {
      for (const ChunkBytes& g : grads) {
        const int idx = LocalIndex(g.chunk_id);
        p.have[idx] = true;
        ++p.chunks_in;
        CopyValues(g, p.grad.data() + shard_offset_[idx]);
      }
      ++p.parts_in;
      if (p.complete() && p.chunks_in != static_cast<int64_t>(chunks_.size())) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "push: sync mode needs all ", chunks_.size(), " chunks of shard ",
            options_.shard_index, ", the ", p.num_parts, " parts of seq ",
            id.seq, " carried ", p.chunks_in));
      }
    }
    if (!error.ok()) {
      pending_.erase(it);  // The whole gradient of this step is refused.
    } else if (completes_push) {
      MaybeCompleteStep();
      TakeReadyWaiters(&ready);
    }
  }
  if (!error.ok()) return Reject("bad_request", error);
  if (completes_push) pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  AnswerWaiters(&ready);
  return result;
}

void ParameterStoreImpl::ApplyToChunk(ChunkState& st, const ChunkBytes& grad,
                                      bool* dropped) {
  absl::MutexLock l(&st.mu);
  const int64_t version = st.version.load(std::memory_order_relaxed);
  const int64_t staleness = version - grad.base_version;
  if (options_.drop_stale_threshold > 0 &&
      staleness > options_.drop_stale_threshold) {
    *dropped = true;
    return;
  }
  const float scale = options_.staleness_aware
                          ? 1.0f / static_cast<float>(std::max<int64_t>(1, staleness))
                          : 1.0f;
  float* params = st.MutableValues();
  const int state_size = optimizer_->StateSize();
  // Elementwise rules: the update may go run by run over the pieces.
  ForEachRun(grad, [&](const char* g, int64_t n, int64_t first) {
    optimizer_->Apply(n, g, scale, params + first,
                      state_size > 0 ? st.opt_state.data() + first * state_size
                                     : nullptr);
  });
  st.version.store(version + 1, std::memory_order_relaxed);
  RecordStaleness(staleness);
}

void ParameterStoreImpl::RecordStaleness(int64_t staleness) {
  staleness_sum_.fetch_add(staleness, std::memory_order_relaxed);
  staleness_count_.fetch_add(1, std::memory_order_relaxed);
  staleness_hist_.Add(staleness);
  int64_t prev = staleness_max_.load(std::memory_order_relaxed);
  while (staleness > prev &&
         !staleness_max_.compare_exchange_weak(prev, staleness)) {
  }
}

int ParameterStoreImpl::ActiveCount() const {
  return static_cast<int>(std::count(active_.begin(), active_.end(), true));
}

int ParameterStoreImpl::StepTarget() const {
  // Workers that contributed to this step and then left still count for it.
  int active = ActiveCount();
  for (const auto& [worker, grad] : pending_) {
    if (!active_[worker] && grad.complete()) ++active;
  }
  return options_.replicas_to_aggregate > 0
             ? std::min(options_.replicas_to_aggregate, active)
             : active;
}

void ParameterStoreImpl::MaybeCompleteStep() {
  const int complete = CompleteCount();
  if (complete == 0) return;
  if (complete >= std::max(StepTarget(), 1)) CompleteStep();
}

void ParameterStoreImpl::CompleteStep() {
  // Gradients still missing parts when the step completes are dropped.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.complete()) {
      ++it;
    } else {
      dropped_stale_.fetch_add(1, std::memory_order_relaxed);
      it = pending_.erase(it);
    }
  }
  if (pending_.empty()) return;
  const float scale = 1.0f / static_cast<float>(pending_.size());
  std::vector<float> sum;
  for (size_t idx = 0; idx < chunks_.size(); ++idx) {
    ChunkState& st = *chunks_[idx];
    const int64_t n = st.info.num_elements;
    sum.assign(n, 0.0f);
    // Worker-index order (std::map), so the sum is the same on every run.
    for (const auto& [worker, grad] : pending_) {
      const float* g = grad.grad.data() + shard_offset_[idx];
      for (int64_t i = 0; i < n; ++i) sum[i] += g[i];
    }
    absl::MutexLock l(&st.mu);
    optimizer_->Apply(n, sum.data(), scale, st.MutableValues(),
                      st.opt_state.data());
    st.version.store(step_ + 1, std::memory_order_relaxed);
  }
  // Every chunk update of a sync step is fresh: staleness 0, counted per
  // chunk update as in async mode.
  for (size_t i = 0; i < pending_.size() * chunks_.size(); ++i) {
    RecordStaleness(0);
  }
  ++step_;
  pending_.clear();
}

int64_t ParameterStoreImpl::MinActiveClock() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clock_.size(); ++w) {
    if (active_[w]) min_clock = std::min(min_clock, clock_[w]);
  }
  return min_clock;
}

void ParameterStoreImpl::RecordLead(const PullSpec& spec) {
  if (options_.mode != TrainMode::kSsp || spec.worker_clock < 0) return;
  const int64_t min_clock = MinActiveClock();
  if (min_clock == std::numeric_limits<int64_t>::max()) return;
  ssp_max_lead_ = std::max(ssp_max_lead_, spec.worker_clock - min_clock);
}

bool ParameterStoreImpl::Ready(const PullSpec& spec) const {
  if (!aborted_.empty() || stopping_) return true;
  if (options_.mode == TrainMode::kSync) return spec.min_version <= step_;
  if (options_.mode == TrainMode::kSsp && spec.worker_clock >= 0) {
    const int64_t min_clock = MinActiveClock();
    return min_clock == std::numeric_limits<int64_t>::max() ||
           min_clock >= spec.worker_clock - options_.staleness;
  }
  return true;
}

void ParameterStoreImpl::TakeReadyWaiters(std::list<Waiter>* out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (Ready(it->spec)) {
      RecordLead(it->spec);
      out->splice(out->end(), waiters_, it++);
    } else {
      ++it;
    }
  }
}

void ParameterStoreImpl::AnswerWaiters(std::list<Waiter>* ready) {
  absl::Status abort;
  {
    absl::MutexLock l(&coord_mu_);
    if (!aborted_.empty()) abort = AbortedStatus();
  }
  for (Waiter& w : *ready) {
    w.done(abort.ok() ? Read(w.spec, w.sink) : abort);
  }
  ready->clear();
}

void ParameterStoreImpl::Evict(const std::vector<int32_t>& workers,
                               const std::string& why) {
  for (int32_t w : workers) {
    active_[w] = false;
    if (std::find(evicted_.begin(), evicted_.end(), w) == evicted_.end()) {
      evicted_.push_back(w);
    }
  }
  const int remaining = ActiveCount();
  Log(absl::StrCat("gave up waiting for worker", workers.size() > 1 ? "s " : " ",
                   absl::StrJoin(workers, ", "), " (", why, "); going on with ",
                   remaining, " worker", remaining == 1 ? "" : "s"));
  // Sync goes on with the gradients already in; ssp with the workers left.
  const int have = options_.mode == TrainMode::kSync ? CompleteCount()
                                                     : remaining;
  if (have < options_.min_replicas) {
    aborted_ = absl::StrCat(
        "job aborted on shard ", options_.shard_index, ": worker",
        workers.size() > 1 ? "s " : " ", absl::StrJoin(workers, ", "),
        " stopped responding (", why, ") and only ", have,
        " of the required --min_replicas=", options_.min_replicas,
        " remain");
    Log(aborted_);
  }
}

void ParameterStoreImpl::TimerLoop() {
  const absl::Duration tick =
      std::min(absl::Milliseconds(20), options_.sync_timeout / 4);
  while (true) {
    std::list<Waiter> ready;
    {
      absl::MutexLock l(&coord_mu_);
      if (coord_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
      const absl::Time now = absl::Now();
      if (!aborted_.empty()) {
        ready.swap(waiters_);
      } else if (options_.mode == TrainMode::kSync && !pending_.empty() &&
                 now - pending_since_ > options_.sync_timeout) {
        std::vector<int32_t> missing;
        for (int32_t w = 0; w < static_cast<int32_t>(active_.size()); ++w) {
          auto it = pending_.find(w);
          if (active_[w] && (it == pending_.end() || !it->second.complete())) {
            missing.push_back(w);
          }
        }
        if (!missing.empty()) {
          Evict(missing, absl::StrCat("no gradient for step ", step_,
                                      " within ",
                                      absl::FormatDuration(options_.sync_timeout)));
        }
        if (aborted_.empty()) {
          if (CompleteCount() >= options_.min_replicas) {
            CompleteStep();
          }
        }
        TakeReadyWaiters(&ready);
      } else if (options_.mode == TrainMode::kSsp) {
        for (const Waiter& w : waiters_) {
          if (now - w.since <= options_.sync_timeout) continue;
          std::vector<int32_t> laggards;
          for (int32_t id = 0; id < static_cast<int32_t>(clock_.size()); ++id) {
            if (active_[id] && clock_[id] < w.spec.worker_clock - options_.staleness) {
              laggards.push_back(id);
            }
          }
          if (!laggards.empty()) {
            Evict(laggards, absl::StrCat("clock behind ",
                                         w.spec.worker_clock - options_.staleness,
                                         " for ",
                                         absl::FormatDuration(options_.sync_timeout)));
          }
          break;  // Evicting for the oldest waiter frees the others too.
        }
        TakeReadyWaiters(&ready);
      }
    }
    AnswerWaiters(&ready);
  }
}

absl::Status ParameterStoreImpl::Leave(int32_t worker_id) {
  if (worker_id < 0 ||
      (options_.mode != TrainMode::kAsync && worker_id >= options_.num_workers)) {
    return Reject("bad_request", absl::InvalidArgumentError(absl::StrCat(
                                     "leave: bad worker_id ", worker_id)));
  }
  if (options_.mode == TrainMode::kAsync) return absl::OkStatus();
  std::list<Waiter> ready;
  {
    absl::MutexLock l(&coord_mu_);
    active_[worker_id] = false;
    if (options_.mode == TrainMode::kSync) MaybeCompleteStep();
    TakeReadyWaiters(&ready);
  }
  AnswerWaiters(&ready);
  return absl::OkStatus();
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
  s.staleness_p50 = staleness_hist_.Quantile(0.5);
  s.staleness_p99 = staleness_hist_.Quantile(0.99);
  s.dropped_stale = dropped_stale_.load();
  s.mode = TrainModeName(options_.mode);
  {
    absl::MutexLock l(&coord_mu_);
    s.steps = step_;
    s.ssp_max_lead = ssp_max_lead_;
    s.evicted_workers = evicted_;
    s.aborted = aborted_;
  }
  absl::MutexLock l(&stats_mu_);
  s.rejected = rejected_;
  return s;
}

}  // namespace

absl::Status ParameterStore::Pull(
    absl::Span<const int32_t> chunk_ids,
    const std::function<void(const ChunkView&)>& sink) {
  PullSpec spec;
  spec.chunk_ids.assign(chunk_ids.begin(), chunk_ids.end());
  absl::Status out;
  // No wait is asked for, so `done` runs before PullWhenReady returns.
  PullWhenReady(std::move(spec), sink, [&out](absl::Status s) { out = s; });
  return out;
}

absl::StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Create(
    const ParameterStoreOptions& options) {
  if (options.mode != TrainMode::kAsync) {
    const int w = options.num_workers;
    if (w < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mode ", TrainModeName(options.mode), " needs num_workers >= 1"));
    }
    if (options.replicas_to_aggregate < 0 || options.replicas_to_aggregate > w ||
        options.min_replicas < 1 || options.min_replicas > w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "need 0 <= replicas_to_aggregate <= num_workers and 1 <= "
          "min_replicas <= num_workers, got ", options.replicas_to_aggregate,
          ", ", options.min_replicas, " with ", w, " workers"));
    }
    if (options.staleness < 0 || options.sync_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "staleness must be >= 0 and sync_timeout positive");
    }
    if (options.staleness_aware || options.drop_stale_threshold > 0) {
      return absl::InvalidArgumentError(
          "staleness_aware and drop_stale_threshold apply to async mode only");
    }
  }
  if (options.drop_stale_threshold < 0) {
    return absl::InvalidArgumentError("drop_stale_threshold must be >= 0");
  }
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
