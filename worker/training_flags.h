// File: worker/training_flags.h
//
// How a worker trains and what it writes, defined once for ps_worker and the
// launcher (which passes them on): the model, the seed, the Downpour loop's
// fetch/push rhythm, augmentation, label smoothing, the input pipeline,
// logging, and the outputs (--save_params, --summary_json). Only a main
// calls these functions.
#ifndef DOWNPOUR_WORKER_TRAINING_FLAGS_H_
#define DOWNPOUR_WORKER_TRAINING_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/train_mode.h"
#include "worker/data/augment.h"

namespace downpour {

// The values of the training flags, checked.
struct TrainingFlags {
  std::string model = "fashion_cnn";
  uint64_t seed = 1;
  int n_fetch = 1;
  double local_lr = 0.01;
  // Random flips; the launcher's 10-epoch measurements (docs/results.md,
  // "Learning-rate rules") put sync at 0.92 with them at W = 2 and 4.
  AugmentPolicy augment = AugmentPolicy::kFlip;
  int augment_crop_padding = 4;
  // Label smoothing measured better for sync at W = 2 and 8, not at 4: off.
  double label_smoothing = 0.0;
  int data_threads = 2;
  int prefetch = 4;
  bool overlap = true;
  // With overlap: gradients leave per bucket of layers during the backward
  // pass, and sync's forward waits per layer (worker/exchange.h).
  bool wait_free = true;
  // Wait-free buckets, KiB (ExchangeOptions::bucket_bytes); 0 picks by
  // mode: async one part, sync and ssp kSyncBucketKb (the flag's text and
  // docs/results.md say why).
  int64_t bucket_kb = 0;
  static constexpr int64_t kSyncBucketKb = 256;
  // Sync: ModelOptions::defer_weight_gradients, its placement
  // (ModelLayout::pinned_blocks) and early pulls
  // (ExchangeOptions::early_pulls). docs/results.md measures it.
  bool defer_weight_gradients = true;
  int log_every = 50;
  int64_t max_steps = 0;
  int64_t max_test_examples = 0;
  // Initial parameters from a file ("": from the seed).
  std::string init_from;
  // Batch norm's running statistics are recomputed over this many training
  // examples before an evaluation (the plain mean over batches of the
  // evaluating model's size; docs/design.md).
  int64_t bn_stats_examples = 5000;
  std::string save_params;
  std::string summary_json;
};

// InvalidArgument naming the flag for a bad value.
absl::StatusOr<TrainingFlags> TrainingFlagsFromFlags();

// The wait-free bucket size in bytes for --bucket_kb (0: by mode) in `mode`
// with parts of `part_bytes`, for a sync model whose weight gradients are
// deferred or not (`deferred`).
int64_t WaitFreeBucketBytes(int64_t bucket_kb, TrainMode mode,
                            int64_t part_bytes, bool deferred = false);

// "--name=value" for each training flag given on the command line, except
// the outputs (--save_params, --summary_json), which the launcher places
// itself.
std::vector<std::string> GivenTrainingFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_TRAINING_FLAGS_H_
