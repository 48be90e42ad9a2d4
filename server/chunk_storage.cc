#include "server/chunk_storage.h"

#include <algorithm>
#include <cstring>

#include "server/byte_runs.h"

namespace downpour {

bool ChunkState::Initialize(const ChunkBytes& values,
                            const Optimizer& optimizer) {
  absl::MutexLock l(&mu_);
  if (values_ != nullptr) return false;
  auto buf = std::make_shared<ValuesBuffer>(info_.num_elements);
  CopyValues(values, buf->data());
  values_ = std::move(buf);
  opt_state_.assign(info_.num_elements * optimizer.StateSize(),
                    optimizer.InitialState());
  return true;
}

ChunkState::Saved ChunkState::Save() const {
  absl::MutexLock l(&mu_);
  Saved s;
  s.values = values_;
  s.opt_state = opt_state_;
  s.version = version_.load(std::memory_order_relaxed);
  return s;
}

void ChunkState::Restore(std::vector<float> values,
                         std::vector<float> opt_state, int64_t version) {
  absl::MutexLock l(&mu_);
  values_ = std::make_shared<ValuesBuffer>(std::move(values));
  spare_.reset();
  opt_state_ = std::move(opt_state);
  version_.store(version, std::memory_order_relaxed);
}

void ChunkState::AdvanceVersion(int64_t version) {
  absl::MutexLock l(&mu_);
  if (version > version_.load(std::memory_order_relaxed)) {
    version_.store(version, std::memory_order_relaxed);
  }
}

bool ChunkState::ApplyGradient(const ChunkBytes& grad,
                               const Optimizer& optimizer,
                               const StalenessRule& rule, int64_t* staleness) {
  absl::MutexLock l(&mu_);
  const int64_t version = version_.load(std::memory_order_relaxed);
  // A restored shard accepts base versions ahead of its own (the workers saw
  // updates the snapshot lost); such an update counts as fresh.
  *staleness = std::max<int64_t>(0, version - grad.base_version);
  if (rule.drop_threshold > 0 && *staleness > rule.drop_threshold) {
    return false;
  }
  const float scale =
      rule.staleness_aware
          ? 1.0f / static_cast<float>(std::max<int64_t>(1, *staleness))
          : 1.0f;
  float* params = MutableValues();
  const int state_size = optimizer.StateSize();
  float* state = state_size > 0 ? opt_state_.data() : nullptr;
  // Elementwise rules: the update may go run by run over the pieces.
  ForEachRun(grad, [&](const char* g, int64_t n, int64_t first) {
    // Update number version + 1 drives the lr schedule and Adam.
    optimizer.ApplyAt(version + 1, n, g, scale, params + first,
                      state != nullptr ? state + first * state_size : nullptr);
  });
  version_.store(version + 1, std::memory_order_relaxed);
  return true;
}

void ChunkState::ApplyDense(const float* grad, float scale,
                            const Optimizer& optimizer, int64_t new_version) {
  absl::MutexLock l(&mu_);
  optimizer.ApplyAt(new_version, info_.num_elements, grad, scale,
                    MutableValues(), opt_state_.data());
  version_.store(new_version, std::memory_order_relaxed);
}

float* ChunkState::MutableValues() {
  if (Unshared(values_)) return values_->data();
  std::shared_ptr<ValuesBuffer> next;
  if (spare_ != nullptr && Unshared(spare_)) {
    next = std::move(spare_);
  } else {
    next = std::make_shared<ValuesBuffer>(values_->size());
  }
  std::memcpy(next->data(), values_->data(), values_->size() * sizeof(float));
  spare_ = std::move(values_);
  values_ = std::move(next);
  return values_->data();
}

// New references are only taken under mu_, so a count of 1 stays 1; the
// fence orders the last reader's reads (its release decrement) before our
// writes.
bool ChunkState::Unshared(const std::shared_ptr<ValuesBuffer>& buf) {
  if (buf.use_count() != 1) return false;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model fences (gcc warns, -Wtsan) and reported
  // the reader's reads against our writes. Copying the pointer is an acq_rel
  // increment of the same count, an acquire it does see, with the fence's
  // effect: every reader that let go of the buffer happens before us.
  { std::shared_ptr<ValuesBuffer> acquire = buf; }
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  return true;
}

ShardChunks ShardChunks::ForShard(const ShardMap& map, int32_t shard_index) {
  ShardChunks out;
  out.local_index_.assign(map.chunks.size(), -1);
  for (int32_t id : map.shard_chunks[shard_index]) {
    out.local_index_[id] = static_cast<int>(out.chunks_.size());
    out.chunks_.push_back(std::make_unique<ChunkState>(map.chunks[id]));
    out.offsets_.push_back(out.total_elements_);
    out.total_elements_ += map.chunks[id].num_elements;
  }
  return out;
}

}  // namespace downpour
