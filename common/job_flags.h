// File: common/job_flags.h
//
// The job's shape, defined once for every process of a job: ps_server,
// ps_worker and the launcher take the same --mode, --epochs, --batch_size,
// --n_push, --data_dir, --dataset, --max_train_examples, --replicas,
// --gpus and --local_aggregation. The workers train with them and the
// servers derive their learning-rate schedule from them
// (server/lr_rules.h), so that a job trains the same whether it was
// started by the launcher, by `node`, by Slurm or by Kubernetes, as long as
// every task is given the same job flags. Only a main calls these
// functions.
//
//   absl::ParseCommandLine(argc, argv);
//   DP_ASSIGN_OR_RETURN(JobFlags job, JobFlagsFromFlags());
#ifndef DOWNPOUR_COMMON_JOB_FLAGS_H_
#define DOWNPOUR_COMMON_JOB_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dataset_kind.h"
#include "common/train_mode.h"

namespace downpour {

// The values of the job flags, checked.
struct JobFlags {
  TrainMode mode = TrainMode::kAsync;
  int epochs = 3;
  int batch_size = 64;
  int n_push = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  DatasetKind dataset = DatasetKind::kFashionMnist;
  int64_t max_train_examples = 0;  // 0: all.
  int replicas = 1;                // CPU replicas per worker process.
  std::vector<int> gpus;           // GPU ordinals, one replica each.
  bool local_sum = true;           // --local_aggregation=sum (else none).

  // Replicas per worker process: one per --gpus entry, else --replicas.
  int ReplicasPerWorker() const {
    return gpus.empty() ? replicas : static_cast<int>(gpus.size());
  }
};

// The job flags, checked: InvalidArgument naming the flag for a bad value.
absl::StatusOr<JobFlags> JobFlagsFromFlags();

// "--gpus" as given ("" or "0,1"), for passing on.
std::string GpusFlagValue(const std::vector<int>& gpus);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_JOB_FLAGS_H_
