#include "worker/data/batcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/data/dataset_info.h"

namespace downpour {
namespace {

using data_internal::AugmentKey;
using data_internal::BatchBufferPool;
using data_internal::ExampleTransform;
using data_internal::SplitMix64;
using data_internal::UniformBelow;

class BatcherImpl : public Batcher {
 public:
  BatcherImpl(const ExampleSource* source,
              std::unique_ptr<ExampleSource> owned_source,
              const BatcherOptions& options, std::vector<int64_t> shard,
              std::shared_ptr<BatchBufferPool> pool)
      : owned_source_(std::move(owned_source)),
        source_(source),
        options_(options),
        shard_(std::move(shard)),
        pool_(std::move(pool)),
        batches_per_epoch_(
            (static_cast<int64_t>(shard_.size()) + options_.batch_size - 1) /
            options_.batch_size),
        total_batches_(batches_per_epoch_ * options_.epochs),
        transform_{source->channels(), source->height(), source->width(),
                   options_.augment, options_.normalize_mean,
                   options_.normalize_std},
        plain_copy_(transform_.IsIdentity()),
        slots_(static_cast<size_t>(options_.prefetch)) {
    for (int i = 0; i < options_.num_threads; ++i) {
      threads_.emplace_back([this] { Work(); });
    }
  }

  ~BatcherImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    may_claim_.SignalAll();
    for (std::thread& t : threads_) t.join();
    // slots_ hand their buffers back to the pool as they are destroyed.
  }

  std::optional<Batch> Next() override {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (next_emit_ >= total_batches_ || next_emit_ >= failed_at_) {
        return std::nullopt;
      }
      std::optional<Batch>& slot = Slot(next_emit_);
      if (slot.has_value()) {
        std::optional<Batch> out = std::move(slot);
        slot.reset();
        ++next_emit_;
        may_claim_.Signal();
        if (out->size == 0) continue;  // Every example skipped.
        return out;
      }
      ready_.Wait(&mu_);
    }
  }

  int64_t BatchesPerEpoch() const override { return batches_per_epoch_; }

  absl::Status status() const override {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  int64_t bad_examples() const override {
    absl::MutexLock lock(&bad_mu_);
    return static_cast<int64_t>(bad_.size());
  }

 private:
  // Producer thread body: claims batch sequence numbers in order, at most
  // `prefetch` ahead of the consumer, builds them outside the lock and parks
  // them in their slot.
  void Work() {
    for (;;) {
      int64_t seq;
      Batch b;
      absl::Status built;
      std::shared_ptr<const std::vector<int64_t>> order;
      {
        absl::MutexLock lock(&mu_);
        while (!stop_ && next_claim_ < total_batches_ &&
               next_claim_ < failed_at_ &&
               next_claim_ >= next_emit_ + options_.prefetch) {
          may_claim_.Wait(&mu_);
        }
        if (stop_ || next_claim_ >= total_batches_ ||
            next_claim_ >= failed_at_) {
          return;
        }
        seq = next_claim_++;
        const int epoch = static_cast<int>(seq / batches_per_epoch_);
        if (epoch != order_epoch_) {
          // Claims are in order, so epochs only move forward; batches of the
          // previous epoch still being built keep its order alive.
          order_ = ShuffledShard(epoch);
          order_epoch_ = epoch;
        }
        order = order_;
        // Buffers are taken in claim order, so that when the pool runs out
        // it is the latest batch that cannot be built, whatever the thread
        // timing.
        built = FillBuffers(seq, order->size(), &b);
      }
      if (built.ok()) built = Build(seq, *order, &b);
      {
        absl::MutexLock lock(&mu_);
        if (built.ok()) {
          Slot(seq) = std::move(b);
        } else {
          // The first failure in batch order is the one reported, whatever
          // the thread timing.
          if (seq < failed_at_) {
            failed_at_ = seq;
            status_ = std::move(built);
          }
          may_claim_.SignalAll();
        }
      }
      ready_.Signal();
    }
  }

  // The shard in epoch `epoch`'s order: a Fisher-Yates shuffle of the natural
  // order by a generator seeded from (seed, worker_index, epoch) only.
  std::shared_ptr<const std::vector<int64_t>> ShuffledShard(int epoch) const {
    auto order = std::make_shared<std::vector<int64_t>>(shard_);
    std::mt19937_64 gen(
        SplitMix64(SplitMix64(SplitMix64(options_.seed) ^
                              static_cast<uint64_t>(options_.worker_index)) ^
                   static_cast<uint64_t>(epoch)));
    for (size_t i = order->size(); i > 1; --i) {
      std::swap((*order)[i - 1], (*order)[UniformBelow(gen, i)]);
    }
    return order;
  }

  // The first and one-past-last positions of batch `seq` in an epoch's
  // order of `size` examples.
  std::pair<size_t, size_t> Range(int64_t seq, size_t size) const {
    const size_t begin = static_cast<size_t>(seq % batches_per_epoch_) *
                         static_cast<size_t>(options_.batch_size);
    return {begin,
            std::min(size, begin + static_cast<size_t>(options_.batch_size))};
  }

  // Takes the buffers of batch `seq` from the pool.
  absl::Status FillBuffers(int64_t seq, size_t size, Batch* b) const {
    const auto [begin, end] = Range(seq, size);
    const size_t n = end - begin;
    const size_t example = static_cast<size_t>(source_->ExampleSize());
    if (!pool_->Fill(n * example, n, b).ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "batcher: cannot allocate a batch buffer from the ",
          options_.allocator->Name(), " host allocator"));
    }
    return absl::OkStatus();
  }

  // Fills `b` (its buffers taken by FillBuffers) with batch `seq` (epoch
  // seq / BatchesPerEpoch()); fails when an example cannot be read (and is
  // not skipped).
  absl::Status Build(int64_t seq, const std::vector<int64_t>& order,
                     Batch* b) const {
    const int epoch = static_cast<int>(seq / batches_per_epoch_);
    const auto [begin, end] = Range(seq, order.size());
    const size_t example = static_cast<size_t>(source_->ExampleSize());
    b->epoch = epoch;
    std::vector<float> raw(plain_copy_ ? 0 : example);
    int kept = 0;  // Examples in the batch so far (skipped ones are not).
    for (size_t k = begin; k < end; ++k) {
      const int64_t idx = order[k];
      float* dst = b->images.data() + static_cast<size_t>(kept) * example;
      int32_t label = 0;
      absl::Status read =
          source_->Read(idx, plain_copy_ ? dst : raw.data(), &label);
      if (!read.ok()) {
        if (!options_.skip_bad_examples ||
            read.code() != absl::StatusCode::kDataLoss) {
          return read;
        }
        absl::MutexLock lock(&bad_mu_);
        bad_.insert(idx);
        continue;
      }
      if (!plain_copy_) {
        // The key is the position in the epoch, skipped examples or not.
        transform_.Apply(raw.data(), dst,
                         AugmentKey(options_.seed, options_.worker_index,
                                    epoch, k));
      }
      b->labels[kept++] = label;
    }
    b->size = kept;
    return absl::OkStatus();
  }

  std::optional<Batch>& Slot(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slots_[static_cast<size_t>(seq % options_.prefetch)];
  }

  const std::unique_ptr<ExampleSource> owned_source_;  // May be null.
  const ExampleSource* const source_;  // owned_source_, or not owned.
  const BatcherOptions options_;
  const std::vector<int64_t> shard_;  // Example indices of this worker.
  const std::shared_ptr<BatchBufferPool> pool_;
  const int64_t batches_per_epoch_;
  const int64_t total_batches_;
  const ExampleTransform transform_;
  const bool plain_copy_;  // No augmentation or normalization: memcpy.

  mutable absl::Mutex mu_;
  absl::CondVar ready_;      // A slot was filled, or a build failed.
  absl::CondVar may_claim_;  // next_emit_ advanced, stop_ set, or a failure.
  // Batch seq lives in slots_[seq % prefetch] from its build until Next();
  // only seqs in [next_emit_, next_emit_ + prefetch) are ever claimed.
  std::vector<std::optional<Batch>> slots_ ABSL_GUARDED_BY(mu_);
  int64_t next_claim_ ABSL_GUARDED_BY(mu_) = 0;  // Next seq to build.
  int64_t next_emit_ ABSL_GUARDED_BY(mu_) = 0;   // Next seq Next() returns.
  // First seq whose build failed; Next() stops there.
  int64_t failed_at_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int order_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  std::shared_ptr<const std::vector<int64_t>> order_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;  // Destructor wants threads out.
  mutable absl::Mutex bad_mu_;
  mutable std::set<int64_t> bad_ ABSL_GUARDED_BY(bad_mu_);  // Skipped.
  std::vector<std::thread> threads_;
};

}  // namespace

namespace {

// InvalidArgument naming the first bad option.
absl::Status ValidateOptions(const ExampleSource* data,
                             const BatcherOptions& o) {
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be >= 1, got ", o.batch_size));
  }
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be >= 1, got ", o.num_workers));
  }
  if (o.worker_index < 0 || o.worker_index >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_index must be in [0, ", o.num_workers, "), got ",
                     o.worker_index));
  }
  if (o.epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epochs must be >= 0, got ", o.epochs));
  }
  if (o.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch must be >= 1, got ", o.prefetch));
  }
  if (o.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 1, got ", o.num_threads));
  }
  if (o.augment.random_crop_padding < 0 ||
      o.augment.random_crop_padding > kMaxCropPadding) {
    return absl::InvalidArgumentError(absl::StrCat(
        "augment.random_crop_padding must be in [0, ", kMaxCropPadding,
        "], got ", o.augment.random_crop_padding));
  }
  if (data->size() < 0 || data->channels() < 1 || data->height() < 1 ||
      data->width() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad example source: size ", data->size(), ", examples of ",
        data->channels(), "x", data->height(), "x", data->width()));
  }
  if (o.normalize_mean.size() != o.normalize_std.size() ||
      (!o.normalize_mean.empty() &&
       static_cast<int64_t>(o.normalize_mean.size()) != data->channels())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "normalize_mean and normalize_std must both be empty or both have one "
        "value per channel (",
        data->channels(), "); got ", o.normalize_mean.size(), " and ",
        o.normalize_std.size()));
  }
  for (size_t c = 0; c < o.normalize_std.size(); ++c) {
    if (!(o.normalize_std[c] > 0) || !std::isfinite(o.normalize_std[c]) ||
        !std::isfinite(o.normalize_mean[c])) {
      return absl::InvalidArgumentError(
          absl::StrCat("normalize: channel ", c,
                       " needs a finite mean and a finite std > 0, "
                       "got mean ",
                       o.normalize_mean[c], " std ", o.normalize_std[c]));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument for a dataset whose sizes disagree.
absl::Status ValidateDataset(const Dataset& data) {
  if (data.size < 0 || data.channels < 1 || data.height < 1 ||
      data.width < 1 ||
      static_cast<int64_t>(data.labels.size()) != data.size ||
      static_cast<int64_t>(data.images.size()) !=
          data.size * data.ExampleSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent dataset: size ", data.size, ", ", data.labels.size(),
        " labels, ", data.images.size(), " floats of images for examples of ",
        data.channels, "x", data.height, "x", data.width));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Batcher>> CreateBatcher(
    const ExampleSource* data, std::unique_ptr<ExampleSource> owned,
    const BatcherOptions& options) {
  BatcherOptions o = options;
  if (o.allocator == nullptr) o.allocator = DefaultHostAllocator();
  DP_RETURN_IF_ERROR(ValidateOptions(data, o));
  std::vector<int64_t> shard = ShardExampleIndices(
      data->size(), DataShard{o.worker_index, o.num_workers});
  if (shard.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", o.worker_index, " of ", o.num_workers,
                     " gets no examples from a dataset of ", data->size()));
  }

  // Enough buffers for the batches in flight (prefetch) plus the one the
  // consumer holds; more are allocated only if the consumer keeps several.
  auto pool = std::make_shared<BatchBufferPool>(o.allocator);
  const int64_t first_batch =
      std::min<int64_t>(o.batch_size, static_cast<int64_t>(shard.size()));
  const int64_t total =
      (static_cast<int64_t>(shard.size()) + o.batch_size - 1) / o.batch_size *
      o.epochs;
  const int reserve =
      static_cast<int>(std::min<int64_t>(int64_t{o.prefetch} + 1, total));
  if (!pool->Reserve(reserve,
                     static_cast<size_t>(first_batch * data->ExampleSize()),
                     static_cast<size_t>(first_batch))
           .ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batcher: cannot allocate ", reserve, " buffers of ", first_batch,
        " examples (", first_batch * data->ExampleSize() * sizeof(float),
        " bytes each) from the ", o.allocator->Name(), " host allocator"));
  }
  return std::unique_ptr<Batcher>(new BatcherImpl(
      data, std::move(owned), o, std::move(shard), std::move(pool)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(
    const Dataset* data, const BatcherOptions& options) {
  if (data == nullptr) return absl::InvalidArgumentError("data is null");
  DP_RETURN_IF_ERROR(ValidateDataset(*data));
  auto source = std::make_unique<DatasetSource>(data);
  const ExampleSource* raw = source.get();
  return CreateBatcher(raw, std::move(source), options);
}

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(
    const ExampleSource* source, const BatcherOptions& options) {
  if (source == nullptr) return absl::InvalidArgumentError("source is null");
  return CreateBatcher(source, nullptr, options);
}

}  // namespace downpour
