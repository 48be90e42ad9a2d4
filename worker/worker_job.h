// File: worker/worker_job.h
//
// What ps_worker does once its flags are read, its replicas built and its
// clients connected (worker/ps_worker_main.cc reads every flag into a
// WorkerOptions and calls these; nothing here reads a flag):
//
//  * Train: loads this worker's shard of the training data, runs the
//    Downpour loop on the replicas (summed into one push, or each its own
//    worker with --local_aggregation=none) and prints the PROGRESS and DONE
//    lines; in --mode=sandblaster it runs worker/sandblaster_job.h on the
//    first replica instead (DONE then has portions and backup_portions);
//  * Eval (--task=eval): pulls the servers' parameters, prints the test
//    accuracy and the servers' stats, and writes --save_params;
//  * EndSpecJob (a job from a cluster spec, worker/job_end.h): a worker
//    other than the chief reports its result; the chief waits for the
//    others, evaluates, prints and writes the SUMMARY, and ends the job.
//
//   DP_ASSIGN_OR_RETURN(WorkerOptions f, ReadFlags());   // in main
//   ... ReplicaSet set; clients ...
//   if (f.task == WorkerTask::kEval) return Eval(f, set.models[0].get(), clients[0].get());
//   DoneReport done;
//   const absl::Status trained = Train(f, set, clients, &done);
//   if (f.spec.has_value()) return EndSpecJob(f, trained, done, ...);
//
// Thread-compatible: one thread calls these; Train starts and joins its own
// threads.
#ifndef DOWNPOUR_WORKER_WORKER_JOB_H_
#define DOWNPOUR_WORKER_WORKER_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/dataset_kind.h"
#include "common/enum_names.h"
#include "common/host_allocator.h"
#include "common/report.h"
#include "common/sandblaster_flags.h"
#include "worker/data/augment.h"
#include "worker/data/example_source.h"
#include "worker/data/input_options.h"
#include "worker/grpc_ps_client.h"
#include "worker/job_end.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_kind.h"
#include "worker/nn/model.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace downpour {

// Everything ps_worker's flags say, already parsed and checked (main's
// ReadFlags). trainer.stop_requested, when set, is the graceful-stop flag
// the Downpour loop polls.
// What ps_worker does: train (the Downpour loop) or evaluate the servers'
// parameters (--task).
enum class WorkerTask { kTrain, kEval };

inline constexpr EnumName<WorkerTask> kWorkerTaskNames[] = {
    {WorkerTask::kTrain, "train"},
    {WorkerTask::kEval, "eval"},
};

// WorkerTask as a flag type.
inline bool AbslParseFlag(absl::string_view text, WorkerTask* t,
                          std::string* error) {
  return ParseEnumFlag(kWorkerTaskNames, text, t, error);
}
inline std::string AbslUnparseFlag(WorkerTask t) {
  return EnumNameOf(kWorkerTaskNames, t);
}

struct WorkerOptions {
  GrpcClientOptions client;
  int num_workers = 1;
  WorkerTask task = WorkerTask::kTrain;
  std::string data_dir, model, save_params;
  std::string init_from;           // --init_from ("": the seed's values).
  int64_t bn_stats_examples = 0;   // --bn_stats_examples.
  DeviceKind device = DeviceKind::kAuto;
  DatasetKind dataset = DatasetKind::kFashionMnist;
  std::vector<int> gpus;
  int replicas = 1, data_threads = 2, augment_crop_padding = 4;
  AugmentPolicy augment = AugmentPolicy::kFlip;
  float label_smoothing = 0.0f;  // Of the training loss.
  // --defer_weight_gradients, in sync mode (ModelOptions).
  bool defer_weight_gradients = false;
  bool local_sum = true;
  int batch_size = 64, epochs = 3, cpu_threads = 1, prefetch = 4;
  uint64_t seed = 1;
  int64_t max_train_examples = 0, max_test_examples = 0, max_chunk_bytes = 0;
  InputOptions input;  // Normalization, resizing, bad images.
  TrainerOptions trainer;
  // --mode=sandblaster (worker/sandblaster_job.h).
  SandblasterOptions sandblaster;
  // Set when the job comes from a cluster spec.
  std::optional<ClusterSpec> spec;
  std::string summary_json;
  absl::Duration job_wait_timeout;
  absl::Time started = absl::Now();
  // Null when --metrics_port is -1.
  std::shared_ptr<WorkerMetrics> metrics;
  int metrics_port = -1;
  std::string metrics_bind;
  CpuBackendKind cpu_backend = CpuBackendKind::kOnednn;
  bool cuda_blocking_sync = false;
  bool cuda_deterministic = false;
};

// The replicas of this process: a backend and a model each, on the devices
// chosen by the caller (ps_worker's BuildReplicas).
struct ReplicaSet {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Model>> models;
  std::unique_ptr<HostAllocator> pinned;  // Null on the CPU.
  HostAllocator* allocator() const {
    return pinned != nullptr ? pinned.get() : DefaultHostAllocator();
  }
};

// Trains the replicas of `set` against the servers: one client in
// `clients`, or one per replica when !f.local_sum. On success *done holds
// this worker's DONE report (also printed).
absl::Status Train(const WorkerOptions& f, ReplicaSet& set,
                   std::unique_ptr<ExampleSource> train,
                   std::vector<std::unique_ptr<ParameterClient>>& clients,
                   DoneReport* done);

// The training split, opened for `model` (an image folder or tensor file is
// converted to its input); InvalidArgument naming both shapes when the data
// set's images are not the model's input, before any server is contacted.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTrainingData(
    const WorkerOptions& f, const Model& model);

// Evaluates the servers' parameters with `model` on the test split, prints
// the eval and server-stats lines and writes f.save_params if set; fills
// *record's eval and stats when `record` is not null.
absl::Status Eval(const WorkerOptions& f, Model* model, ParameterClient* client,
                  ChiefRecord* record = nullptr);

// Ends a job from a cluster spec (f.spec set) after Train
// returned `trained` (see the file comment). Returns the first error.
absl::Status EndSpecJob(const WorkerOptions& f, const absl::Status& trained,
                        const DoneReport& done, Model* model,
                        ParameterClient* client);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_WORKER_JOB_H_
