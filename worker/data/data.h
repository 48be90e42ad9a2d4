// File: worker/data/data.h
//
// Training data: an IDX reader (the MNIST / Fashion-MNIST format, gzipped or
// raw) and a batcher that gives worker i of W its own shard of the examples,
// reshuffled every epoch from a seed, with a background thread that prepares
// batches ahead of the training loop.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(
//       dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"));
//   BatcherOptions o; o.worker_index = 1; o.num_workers = 2; o.batch_size = 64;
//   DP_ASSIGN_OR_RETURN(auto batcher, Batcher::Create(&train, o));
//   while (std::optional<Batch> b = batcher->Next()) { ... }
#ifndef DOWNPOUR_WORKER_DATA_DATA_H_
#define DOWNPOUR_WORKER_DATA_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

// Images as float32 in [0, 1], NCHW (C = 1 for IDX), labels as class indices.
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

struct Batch {
  int size = 0;
  int epoch = 0;                // 0-based epoch this batch belongs to.
  std::vector<float> images;    // size * ExampleSize()
  std::vector<int32_t> labels;  // size
};

struct BatcherOptions {
  int worker_index = 0;
  int num_workers = 1;
  int batch_size = 64;
  int epochs = 1;
  uint64_t seed = 1;
  // Batches prepared ahead by the background thread.
  int prefetch = 4;
};

// Worker i takes the examples whose index is congruent to i mod W (so shards
// differ by at most one example), shuffles its shard at the start of every
// epoch with a generator seeded by (seed, worker_index, epoch), and emits full
// batches; the last partial batch of an epoch is emitted too.
// Thread-safety: Next() is called from one thread; the producer thread is
// internal and joined by the destructor.
class Batcher {
 public:
  // `data` must outlive the batcher.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(
      const Dataset* data, const BatcherOptions& options);
  virtual ~Batcher() = default;
  // The next batch, or nullopt after the last epoch.
  virtual std::optional<Batch> Next() = 0;
  // Batches per epoch for this worker.
  virtual int64_t BatchesPerEpoch() const = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_DATA_H_
