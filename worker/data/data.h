// File: worker/data/data.h
//
// Training data: an IDX reader (the MNIST / Fashion-MNIST format, gzipped or
// raw), a CIFAR-10 binary reader, and a batcher that gives worker i of W its
// own shard of the examples, reshuffled every epoch from a seed, with a pool
// of CPU threads that copy, augment (random crop, flip) and normalize batches
// ahead of the training loop into recycled (possibly pinned) host buffers.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(
//       dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"));
//   BatcherOptions o; o.worker_index = 1; o.num_workers = 2; o.batch_size = 64;
//   DP_ASSIGN_OR_RETURN(auto batcher, Batcher::Create(&train, o));
//   while (std::optional<Batch> b = batcher->Next()) { ... }
//   DP_RETURN_IF_ERROR(batcher->status());
//
//   // CIFAR-10 with the usual augmentation:
//   DP_ASSIGN_OR_RETURN(Dataset cifar, LoadCifar10Split(dir, /*train=*/true));
//   o.augment.random_crop_padding = 4; o.augment.horizontal_flip = true;
//   o.normalize_mean.assign(kCifar10Mean, kCifar10Mean + 3);
//   o.normalize_std.assign(kCifar10Std, kCifar10Std + 3);
#ifndef DOWNPOUR_WORKER_DATA_DATA_H_
#define DOWNPOUR_WORKER_DATA_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/host_allocator.h"

namespace downpour {

// Images as float32 in [0, 1], NCHW (C = 1 for IDX, 3 for CIFAR-10), labels
// as class indices.
struct Dataset {
  int64_t size = 0;
  int channels = 1, height = 0, width = 0;
  int num_classes = 10;
  std::vector<float> images;   // size * channels * height * width
  std::vector<int32_t> labels;  // size

  int64_t ExampleSize() const { return int64_t{channels} * height * width; }
};

// Reads an IDX image file (magic 0x00000803, u8 pixels) and its IDX label
// file (magic 0x00000801, u8 labels). Files ending in ".gz" are inflated with
// zlib. A missing, truncated or corrupt file, or counts that disagree, give
// an error naming the file and the problem. `max_examples` > 0 keeps only the
// first examples.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_examples = 0);

// Fashion-MNIST / MNIST file names under `dir` ("train" or "t10k").
absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, bool train,
                                       int64_t max_examples = 0);

// Reads CIFAR-10 binary files (the "binary version": records of 1 label byte
// then 3072 pixel bytes, 3 channel planes of 32x32, R then G then B) and
// concatenates them in order: 3x32x32 images scaled to [0, 1]. A missing file
// is NotFound; a size that is not a whole number of 3073-byte records (or an
// empty file) is DataLoss; a label above 9 is InvalidArgument; each message
// names the file and the byte offset. `max_examples` > 0 keeps only the first
// examples, and files after the one that reaches it are not read.
absl::StatusOr<Dataset> LoadCifar10Files(const std::vector<std::string>& paths,
                                         int64_t max_examples = 0);

// The CIFAR-10 split under `dir`: data_batch_1.bin .. data_batch_5.bin
// (50000 examples) when `train`, else test_batch.bin (10000). `dir` may be the
// folder that holds the files or the one the archive was unpacked in (which
// holds cifar-10-batches-bin/).
absl::StatusOr<Dataset> LoadCifar10Split(const std::string& dir, bool train,
                                         int64_t max_examples = 0);

// Per-channel means and standard deviations of the CIFAR-10 training set
// (pixels in [0, 1]), the usual values for BatcherOptions::normalize_*.
inline constexpr float kCifar10Mean[3] = {0.4914f, 0.4822f, 0.4465f};
inline constexpr float kCifar10Std[3] = {0.2470f, 0.2435f, 0.2616f};

namespace data_internal {
class BatchBufferPool;
}  // namespace data_internal

// One batch of examples, NCHW floats after augmentation and normalization.
// The buffers come from the batcher's pool of HostAllocator memory and go back
// to it (not to the allocator) when the Batch is destroyed or assigned over,
// so steady-state training allocates nothing. A Batch may outlive the Batcher
// that made it (the pool lives while any of its batches does), but not the
// HostAllocator. Move-only.
class Batch {
 public:
  int size = 0;
  int epoch = 0;              // 0-based epoch this batch belongs to.
  HostArray<float> images;    // size * ExampleSize()
  HostArray<int32_t> labels;  // size

  Batch() = default;
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&& o) noexcept;
  ~Batch();

 private:
  friend class data_internal::BatchBufferPool;
  void ReturnBuffers();
  // Where images/labels go back to; null for a Batch built by hand.
  std::shared_ptr<data_internal::BatchBufferPool> pool_;
};

// Train-time augmentation, applied per example in this order: random crop
// with zero padding, horizontal flip (then BatcherOptions' normalization).
// Off by default.
struct AugmentOptions {
  // p > 0: pad the image with p zero pixels on every side and take an HxW
  // crop at a uniformly random offset in [0, 2p] x [0, 2p], as torchvision's
  // RandomCrop(size, padding=p) does. 0 = off.
  int random_crop_padding = 0;
  // Mirror left-right with probability 1/2.
  bool horizontal_flip = false;
};

struct BatcherOptions {
  int worker_index = 0;
  int num_workers = 1;
  int batch_size = 64;
  int epochs = 1;
  uint64_t seed = 1;
  // Batches prepared ahead of the consumer (ready or being built).
  int prefetch = 4;
  // CPU threads that copy, augment and normalize examples. Results do not
  // depend on it.
  int num_threads = 2;
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
  virtual ~Batcher() = default;
  // The next batch, or nullopt after the last epoch (or after a failure,
  // see status()).
  virtual std::optional<Batch> Next() = 0;
  // Batches per epoch for this worker.
  virtual int64_t BatchesPerEpoch() const = 0;
  // Not OK when a batch could not be built (a buffer allocation failed); Next()
  // then returned nullopt early. Check it after the loop.
  virtual absl::Status status() const { return absl::OkStatus(); }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_DATA_H_
