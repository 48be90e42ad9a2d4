#include "common/job_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(downpour::TrainMode, mode, downpour::JobFlags{}.mode,
          "Training mode: async (Downpour: every push applied on arrival), "
          "sync (each step's update is the mean of the workers' gradients), "
          "ssp (stale-synchronous, bounded by --staleness) or sandblaster "
          "(L-BFGS on the shards, work portions handed out by the chief; "
          "--lbfgs_history, --sandblaster_batch, --portion_examples). The "
          "same for every process of the job.");
ABSL_FLAG(int, epochs, downpour::JobFlags{}.epochs,
          "Passes of each worker over its share of the training set (>= 0).");
ABSL_FLAG(int, batch_size, downpour::JobFlags{}.batch_size,
          "Examples per minibatch of one replica (>= 1).");
ABSL_FLAG(int, n_push, downpour::JobFlags{}.n_push,
          "Workers push their accrued gradients every n_push steps (>= 1).");
ABSL_FLAG(std::string, data_dir, downpour::JobFlags{}.data_dir,
          "Folder of the data set (--dataset): the workers read it, the "
          "servers count its training examples for the schedule.");
ABSL_FLAG(downpour::DatasetKind, dataset, downpour::JobFlags{}.dataset,
          "fashion_mnist (IDX files), cifar10 (binary batches), "
          "image_folder (PNG/JPEG files in train/<class>/ and test/<class>/) "
          "or safetensors (train.safetensors, test.safetensors: images "
          "[N,C,H,W] uint8/float32, labels [N]) in --data_dir.");
ABSL_FLAG(int64_t, max_train_examples, downpour::JobFlags{}.max_train_examples,
          "Train on the first N training examples only (0: all).");
ABSL_FLAG(int, replicas, downpour::JobFlags{}.replicas,
          "CPU replicas per worker process (--gpus sets the count on GPUs); "
          "in [1, 64].");
ABSL_FLAG(std::string, gpus, "",
          "Comma-separated GPU ordinals of each worker process, one replica "
          "per entry (0,0 runs two replicas on GPU 0). Empty: one replica "
          "on GPU 0 for --device=cuda. launch deals its list among its "
          "worker processes (--gpus_per_worker).");
ABSL_FLAG(std::string, local_aggregation, "sum",
          "With several replicas in a process: sum (average their gradients "
          "and push once, one worker id) or none (each replica is a worker "
          "of its own, ids worker_index*R + r of num_workers*R).");

namespace downpour {

absl::StatusOr<JobFlags> JobFlagsFromFlags() {
  JobFlags j;
  j.mode = absl::GetFlag(FLAGS_mode);
  j.epochs = absl::GetFlag(FLAGS_epochs);
  j.batch_size = absl::GetFlag(FLAGS_batch_size);
  j.n_push = absl::GetFlag(FLAGS_n_push);
  j.data_dir = absl::GetFlag(FLAGS_data_dir);
  j.dataset = absl::GetFlag(FLAGS_dataset);
  j.max_train_examples = absl::GetFlag(FLAGS_max_train_examples);
  j.replicas = absl::GetFlag(FLAGS_replicas);
  if (j.epochs < 0 || j.batch_size < 1 || j.n_push < 1 ||
      j.max_train_examples < 0) {
    return absl::InvalidArgumentError(
        "--batch_size and --n_push must be >= 1, --epochs and "
        "--max_train_examples >= 0");
  }
  if (j.replicas < 1 || j.replicas > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas must be in [1, 64], got ", j.replicas));
  }
  const std::string gpus = absl::GetFlag(FLAGS_gpus);
  for (absl::string_view g : absl::StrSplit(gpus, ',', absl::SkipEmpty())) {
    int ordinal;
    if (!absl::SimpleAtoi(g, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus must be a comma-separated list of GPU ordinals, got '",
          gpus, "'"));
    }
    j.gpus.push_back(ordinal);
  }
  if (j.gpus.size() > 64) {
    return absl::InvalidArgumentError("--gpus: at most 64 replicas");
  }
  const std::string agg = absl::GetFlag(FLAGS_local_aggregation);
  if (agg != "sum" && agg != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_aggregation must be sum or none, got '", agg, "'"));
  }
  j.local_sum = agg == "sum";
  return j;
}

std::string GpusFlagValue(const std::vector<int>& gpus) {
  return absl::StrJoin(gpus, ",");
}

}  // namespace downpour
