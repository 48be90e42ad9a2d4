// File: worker/data/batcher.h
//
// The batcher that gives worker i of W its own shard of a Dataset, or of any
// ExampleSource (example_source.h: an image folder, a tensor file),
// reshuffled every epoch from a seed, with a pool of CPU threads that read
// (decode), augment (random crop, flip; augment.h) and normalize batches
// ahead of the training loop into recycled (possibly pinned) host buffers
// (buffer_pool.h): the bounded prefetch queue of the input pipeline.
//
// Usage:
//   BatcherOptions o; o.worker_index = 1; o.num_workers = 2; o.batch_size = 64;
//   DP_ASSIGN_OR_RETURN(auto batcher, Batcher::Create(&train, o));
//   while (std::optional<Batch> b = batcher->Next()) { ... }
//   DP_RETURN_IF_ERROR(batcher->status());
#ifndef DOWNPOUR_WORKER_DATA_BATCHER_H_
#define DOWNPOUR_WORKER_DATA_BATCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "worker/data/augment.h"
#include "worker/data/buffer_pool.h"
#include "worker/data/dataset.h"
#include "worker/data/example_source.h"

namespace downpour {

struct BatcherOptions {
  int worker_index = 0;
  int num_workers = 1;
  int batch_size = 64;
  int epochs = 1;
  uint64_t seed = 1;
  // Batches prepared ahead of the consumer (ready or being built).
  int prefetch = 4;
  // CPU threads that read (decode), augment and normalize examples. Results
  // do not depend on it.
  int num_threads = 2;
  // An example whose Read fails with DataLoss (a corrupt image) is left out
  // of its batch and counted (bad_examples()) instead of stopping the
  // batcher with that error.
  bool skip_bad_examples = false;
  // Where batch buffers come from, e.g. a backend's pinned allocator; null
  // means DefaultHostAllocator(). Not owned; must outlive every Batch.
  HostAllocator* allocator = DefaultHostAllocator();
  AugmentOptions augment;
  // Per-channel normalization x -> (x - mean[c]) / std[c], applied after
  // augmentation (so padding pixels become (0 - mean[c]) / std[c]). Both empty
  // (off) or both of size Dataset::channels.
  std::vector<float> normalize_mean;
  std::vector<float> normalize_std;
};

// Worker i takes the examples whose index is congruent to i mod W (so shards
// differ by at most one example), shuffles its shard at the start of every
// epoch with a generator seeded by (seed, worker_index, epoch), and emits full
// batches in order; the last partial batch of an epoch is emitted too.
// Augmentation draws for an example come from (seed, worker_index, epoch,
// position in the epoch), never from a shared generator, so batch contents are
// bit-identical for every num_threads and prefetch.
//
// At most `prefetch` batches are ready or being built at a time; the buffers
// of about prefetch + 1 full batches are allocated by Create() and recycled.
//
// Thread-safety: Next() is called from one thread; the producer threads are
// internal and joined by the destructor.
class Batcher {
 public:
  // `data` must outlive the batcher. Fails on bad options or a dataset whose
  // sizes disagree (InvalidArgument), or when the first buffers cannot be
  // allocated (ResourceExhausted).
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(
      const Dataset* data, const BatcherOptions& options);
  // The same over any source, which must outlive the batcher and is read
  // from the batcher's threads concurrently.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(
      const ExampleSource* source, const BatcherOptions& options);
  virtual ~Batcher() = default;
  // The next batch, or nullopt after the last epoch (or after a failure,
  // see status()).
  virtual std::optional<Batch> Next() = 0;
  // Batches per epoch for this worker.
  virtual int64_t BatchesPerEpoch() const = 0;
  // Not OK when a batch could not be built (a buffer allocation failed, or
  // an example could not be read and is not skipped: the source's error,
  // naming the file); Next() then returned nullopt early. Check it after the
  // loop.
  virtual absl::Status status() const { return absl::OkStatus(); }
  // With skip_bad_examples: the distinct examples skipped so far (a bad file
  // counts once however many epochs meet it). A batch whose examples were
  // all skipped is not emitted.
  virtual int64_t bad_examples() const { return 0; }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_BATCHER_H_
