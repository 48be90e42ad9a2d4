// File: worker/data/idx_reader.h
//
// The IDX format of MNIST and Fashion-MNIST: an image file and a label file,
// gzipped or raw.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(
//       dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"));
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> src,
//                       OpenMnistSplit(dir, /*train=*/true));
//
// Errors: NotFound (a missing file), DataLoss (a file that cannot be read or
// is not well-formed IDX: bad magic, truncated payload, corrupt gzip stream),
// InvalidArgument (well-formed files whose counts disagree, or a label
// outside [0, 10)). Every message names the file.
//
// Thread-safety: the functions keep no state; call them from any thread.
#ifndef DOWNPOUR_WORKER_DATA_IDX_READER_H_
#define DOWNPOUR_WORKER_DATA_IDX_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/data/example_source.h"

namespace downpour {

// Reads an IDX image file (magic 0x00000803, u8 pixels) and its IDX label
// file (magic 0x00000801, u8 labels). Files ending in ".gz" are inflated with
// zlib. A missing, truncated or corrupt file, or counts that disagree, give
// an error naming the file and the problem. `max_examples` > 0 keeps only the
// first examples.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_examples = 0);

// The same files as an ExampleSource that keeps the u8 pixels (a quarter
// of the floats' memory, nothing converted before the first step) and
// converts each example as it is read, to the same floats.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenIdx(
    const std::string& images_path, const std::string& labels_path,
    int64_t max_examples = 0);

// Fashion-MNIST / MNIST file names under `dir` ("train" or "t10k"): the
// .gz as distributed, else an already-gunzipped copy.
absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, bool train,
                                       int64_t max_examples = 0);
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenMnistSplit(
    const std::string& dir, bool train, int64_t max_examples = 0);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_IDX_READER_H_
