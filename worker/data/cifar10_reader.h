// File: worker/data/cifar10_reader.h
//
// The CIFAR-10 "binary version" files, and the dataset's per-channel
// statistics for normalization.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(Dataset cifar, LoadCifar10Split(dir, /*train=*/true));
//   o.normalize_mean.assign(kCifar10Mean, kCifar10Mean + 3);
//   o.normalize_std.assign(kCifar10Std, kCifar10Std + 3);
//
// Thread-safety: the functions keep no state; call them from any thread.
#ifndef DOWNPOUR_WORKER_DATA_CIFAR10_READER_H_
#define DOWNPOUR_WORKER_DATA_CIFAR10_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace downpour {

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

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_CIFAR10_READER_H_
