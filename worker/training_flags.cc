#include "worker/training_flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flag_args.h"

ABSL_FLAG(std::string, model, downpour::TrainingFlags{}.model,
          "The network: a built-in model (fashion_cnn, cifar_vgg, resnet20, "
          "inception_small) or the path of a model spec file "
          "(models/README.md).");
ABSL_FLAG(std::string, init_from, "",
          "Start from the parameters of this safetensors file (a saved "
          "--save_params of the same model) instead of random ones; checked "
          "against the model's tensor names and shapes.");
ABSL_FLAG(int64_t, bn_stats_examples, downpour::TrainingFlags{}.bn_stats_examples,
          "Models with batch norm: training examples over which the running "
          "statistics are recomputed with the final parameters before "
          "evaluating and saving (0: keep the evaluating worker's running "
          "averages).");
ABSL_FLAG(uint64_t, seed, downpour::TrainingFlags{}.seed,
          "Seed of the initial parameters and of the workers' shuffling and "
          "augmentation.");
ABSL_FLAG(int, n_fetch, downpour::TrainingFlags{}.n_fetch,
          "Workers pull parameters every n_fetch steps (>= 1).");
ABSL_FLAG(double, local_lr, downpour::TrainingFlags{}.local_lr,
          "Learning rate of the local step between fetches (n_fetch > 1).");
ABSL_FLAG(downpour::AugmentPolicy, augment, downpour::TrainingFlags{}.augment,
          "Training-image augmentation: none, flip (random horizontal flips) "
          "or crop_flip (also random crops, padding --augment_crop_padding).");
ABSL_FLAG(int, augment_crop_padding, downpour::TrainingFlags{}.augment_crop_padding,
          "--augment=crop_flip: pixels of zero padding around the random "
          "crop.");
ABSL_FLAG(double, label_smoothing, downpour::TrainingFlags{}.label_smoothing,
          "Label smoothing of the training loss, in [0, 1): targets "
          "(1 - eps) onehot + eps / classes.");
ABSL_FLAG(int, data_threads, downpour::TrainingFlags{}.data_threads,
          "CPU threads decoding/augmenting batches.");
ABSL_FLAG(int, prefetch, downpour::TrainingFlags{}.prefetch,
          "Batches prepared ahead by the input threads.");
ABSL_FLAG(bool, overlap, downpour::TrainingFlags{}.overlap,
          "Push and pull in the background while computing the next step.");
ABSL_FLAG(bool, wait_free, downpour::TrainingFlags{}.wait_free,
          "With --overlap: push each bucket of layers' gradients as soon as "
          "the backward pass has produced it, and in sync mode start each "
          "layer's forward as soon as its own parameters arrived (wait-free "
          "backpropagation). Needs --n_fetch=1, --n_push=1, one replica and "
          "no --local_lr; otherwise the plain overlapped exchange runs.");
ABSL_FLAG(int64_t, bucket_kb, downpour::TrainingFlags{}.bucket_kb,
          "--wait_free: tensors from the end of the model are grouped into "
          "buckets of at least this many KiB, each pushed as soon as the "
          "backward pass has produced it. 0: by mode: async, one part "
          "(--part_kb), as each call costs both ends CPU and no step waits "
          "for the push; sync and ssp, 256, so that most of the gradient is "
          "at the servers when the backward pass ends.");
ABSL_FLAG(bool, defer_weight_gradients,
          downpour::TrainingFlags{}.defer_weight_gradients,
          "Sync: the layers right above the first one (fused convolutions) "
          "compute their weight gradients after the first layer's backward, "
          "so the first layer's gradient, whose new values the next step "
          "needs first, is final that much earlier; their tensors lead the "
          "flat vector, the two are kept whole on different shards, each "
          "shard's gradient goes in parts of --part_kb (unless --bucket_kb "
          "is given) and a shard's pull leaves with its last part. The same "
          "bits as without. It changes the declared layout: every worker of "
          "a job needs the same setting (an evaluation follows its servers' "
          "mode). No effect in other modes.");
ABSL_FLAG(int, log_every, downpour::TrainingFlags{}.log_every,
          "Print progress every N steps.");
ABSL_FLAG(int64_t, max_steps, downpour::TrainingFlags{}.max_steps,
          "Stop after N steps (0: after --epochs).");
ABSL_FLAG(int64_t, max_test_examples, downpour::TrainingFlags{}.max_test_examples,
          "Evaluate only the first N test examples (0: all).");
ABSL_FLAG(std::string, save_params, "",
          "Write the trained parameters to this safetensors file (the "
          "evaluation, or the chief of a job from a cluster spec).");
ABSL_FLAG(std::string, summary_json, "",
          "Write the run's SUMMARY JSON to this file (the launcher, or the "
          "chief of a job from a cluster spec).");

namespace downpour {

absl::StatusOr<TrainingFlags> TrainingFlagsFromFlags() {
  TrainingFlags t;
  t.model = absl::GetFlag(FLAGS_model);
  t.seed = absl::GetFlag(FLAGS_seed);
  t.n_fetch = absl::GetFlag(FLAGS_n_fetch);
  t.local_lr = absl::GetFlag(FLAGS_local_lr);
  t.augment = absl::GetFlag(FLAGS_augment);
  t.augment_crop_padding = absl::GetFlag(FLAGS_augment_crop_padding);
  t.label_smoothing = absl::GetFlag(FLAGS_label_smoothing);
  t.data_threads = absl::GetFlag(FLAGS_data_threads);
  t.prefetch = absl::GetFlag(FLAGS_prefetch);
  t.overlap = absl::GetFlag(FLAGS_overlap);
  t.wait_free = absl::GetFlag(FLAGS_wait_free);
  t.bucket_kb = absl::GetFlag(FLAGS_bucket_kb);
  if (t.bucket_kb < 0 || t.bucket_kb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bucket_kb must be in [0, 2^30], got ", t.bucket_kb));
  }
  t.defer_weight_gradients = absl::GetFlag(FLAGS_defer_weight_gradients);
  t.log_every = absl::GetFlag(FLAGS_log_every);
  t.max_steps = absl::GetFlag(FLAGS_max_steps);
  t.max_test_examples = absl::GetFlag(FLAGS_max_test_examples);
  t.init_from = absl::GetFlag(FLAGS_init_from);
  t.bn_stats_examples = absl::GetFlag(FLAGS_bn_stats_examples);
  if (t.bn_stats_examples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bn_stats_examples must be >= 0, got ", t.bn_stats_examples));
  }
  t.save_params = absl::GetFlag(FLAGS_save_params);
  t.summary_json = absl::GetFlag(FLAGS_summary_json);
  if (!(t.label_smoothing >= 0 && t.label_smoothing < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--label_smoothing must be in [0, 1), got ", t.label_smoothing));
  }
  if (t.augment_crop_padding < 0 || t.augment_crop_padding > kMaxCropPadding) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--augment_crop_padding must be in [0, ", kMaxCropPadding, "], got ",
        t.augment_crop_padding));
  }
  if (t.n_fetch < 1 || t.prefetch < 1 || t.data_threads < 1) {
    return absl::InvalidArgumentError(
        "--n_fetch, --prefetch and --data_threads must be >= 1");
  }
  return t;
}

int64_t WaitFreeBucketBytes(int64_t bucket_kb, TrainMode mode,
                            int64_t part_bytes, bool deferred) {
  if (bucket_kb > 0) return bucket_kb << 10;
  if (mode == TrainMode::kAsync || (mode == TrainMode::kSync && deferred)) {
    return std::max<int64_t>(1, part_bytes);
  }
  return TrainingFlags::kSyncBucketKb << 10;
}

// Not forwarded by launch: max_test_examples save_params summary_json
// (launch sets them itself: the evaluator's share, the chief's outputs).
std::vector<std::string> GivenTrainingFlagArgs() {
  return GivenFlagArgs({"model", "seed", "n_fetch", "local_lr", "augment",
                        "augment_crop_padding", "label_smoothing",
                        "data_threads", "prefetch", "overlap", "wait_free",
                        "bucket_kb", "defer_weight_gradients", "log_every",
                        "max_steps", "init_from", "bn_stats_examples"});
}

}  // namespace downpour
