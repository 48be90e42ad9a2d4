#include "worker/worker_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/sandblaster_flags.h"
#include "common/cluster_spec_flags.h"
#include "common/job_flags.h"
#include "common/metrics_flags.h"
#include "common/status_macros.h"
#include "rpc/security_flags.h"
#include "worker/backend_flags.h"
#include "worker/input_flags.h"
#include "worker/training_flags.h"
#include "worker/transport_flags.h"

ABSL_FLAG(int, worker_index, 0,
          "This worker's index, 0 <= index < --num_workers (a cluster spec "
          "gives its own).");
ABSL_FLAG(downpour::WorkerTask, task, downpour::WorkerTask::kTrain,
          "train, or eval (test accuracy of the servers' parameters, "
          "optionally --save_params).");
ABSL_FLAG(std::string, position_file, "",
          "Keep this worker's data position (the steps whose pushes the "
          "servers acknowledged) in this file, written as each push is "
          "acknowledged and removed when training ends; a new process of "
          "the same worker index, data and job shape resumes from it "
          "instead of beginning its epochs again. launch sets it to "
          "<log_dir>/ckpt/worker<k>.position.");
ABSL_FLAG(int, debug_step_delay_ms, 0,
          "Testing only: sleep this long in every step, to play a straggler.");
ABSL_FLAG(double, job_wait_timeout_s, 7200,
          "Chief of a spec job: how long to wait for the other workers.");

namespace downpour {
namespace {

// Servers, index and worker count from the spec, if any.
absl::Status ApplySpec(WorkerOptions* f) {
  DP_ASSIGN_OR_RETURN(f->spec, ResolveClusterSpec(
                                   ClusterSpecInputsFromFlags("worker"),
                                   ProcessEnvLookup()));
  if (!f->spec.has_value()) return absl::OkStatus();
  if (f->spec->task_type != TaskType::kWorker) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster spec (", f->spec->source, ") makes this task ps ",
        f->spec->task_index, "; run ps_server, or deploy/node, for it"));
  }
  f->client.hosts = f->spec->ps;
  f->client.standby_hosts = f->spec->ps_standby;
  f->client.worker_id = f->spec->task_index;
  f->num_workers = static_cast<int>(f->spec->workers.size());
  return absl::OkStatus();
}

// The servers, this worker's index, the transport and the security
// options; with a cluster spec, its servers, index and worker count.
absl::Status ReadConnection(WorkerOptions* f) {
  const ClusterSpecInputs in = ClusterSpecInputsFromFlags("worker");
  f->client.hosts = absl::StrSplit(in.ps_hosts, ',', absl::SkipEmpty());
  f->client.worker_id = absl::GetFlag(FLAGS_worker_index);
  DP_RETURN_IF_ERROR(TransportOptionsFromFlags(&f->client));
  DP_ASSIGN_OR_RETURN(f->client.security, SecurityOptionsFromFlags());
  f->num_workers = std::max(1, NumWorkersFromFlags());
  DP_RETURN_IF_ERROR(ApplySpec(f));
  if (f->client.hosts.empty()) {
    return absl::InvalidArgumentError(
        "--ps_hosts is required (or a cluster spec: --worker_hosts, "
        "TF_CONFIG, Slurm)");
  }
  DP_ASSIGN_OR_RETURN(f->client.standby_hosts,
                      ResolveStandbyHosts(in, f->spec,
                                          static_cast<int>(f->client.hosts.size())));
  return absl::OkStatus();
}

// The job's shape, training and backend flags.
absl::Status ReadJob(WorkerOptions* f) {
  DP_ASSIGN_OR_RETURN(const JobFlags job, JobFlagsFromFlags());
  DP_ASSIGN_OR_RETURN(const TrainingFlags t, TrainingFlagsFromFlags());
  DP_ASSIGN_OR_RETURN(const BackendFlags b, BackendFlagsFromFlags());
  f->trainer.mode = job.mode;
  f->epochs = job.epochs;
  f->batch_size = job.batch_size;
  f->trainer.n_push = job.n_push;
  f->data_dir = job.data_dir;
  f->dataset = job.dataset;
  f->max_train_examples = job.max_train_examples;
  f->replicas = job.replicas;
  f->gpus = job.gpus;
  f->local_sum = job.local_sum;
  f->model = t.model;
  f->seed = t.seed;
  f->trainer.n_fetch = t.n_fetch;
  f->trainer.local_lr = static_cast<float>(t.local_lr);
  f->augment = t.augment;
  f->augment_crop_padding = t.augment_crop_padding;
  f->label_smoothing = static_cast<float>(t.label_smoothing);
  f->data_threads = t.data_threads;
  DP_ASSIGN_OR_RETURN(f->input, InputOptionsFromFlags());
  f->prefetch = t.prefetch;
  f->trainer.overlap = t.overlap;
  f->trainer.wait_free = t.wait_free;
  // Sync only; an evaluation follows its servers' mode (FollowServersMode).
  f->defer_weight_gradients =
      t.defer_weight_gradients &&
      (job.mode == TrainMode::kSync || f->task == WorkerTask::kEval);
  f->trainer.early_pulls =
      f->defer_weight_gradients && job.mode == TrainMode::kSync;
  f->trainer.bucket_bytes =
      WaitFreeBucketBytes(t.bucket_kb, job.mode, f->client.part_bytes,
                          f->trainer.early_pulls);
  f->trainer.log_every = t.log_every;
  f->trainer.max_steps = t.max_steps;
  f->max_test_examples = t.max_test_examples;
  f->init_from = t.init_from;
  f->bn_stats_examples = t.bn_stats_examples;
  f->save_params = t.save_params;
  f->summary_json = t.summary_json;
  f->device = b.device;
  f->cpu_threads = b.cpu_threads;
  f->cpu_backend = b.cpu_backend;
  f->cuda_blocking_sync = b.cuda_blocking_sync;
  f->cuda_deterministic = b.cuda_deterministic;
  f->max_chunk_bytes = MaxChunkBytesFromFlags();
  DP_ASSIGN_OR_RETURN(f->sandblaster, SandblasterOptionsFromFlags());
  return absl::OkStatus();
}

// The checks across flags: the index, sizes and device.
absl::Status Validate(const WorkerOptions& f) {
  if (f.num_workers < 1 || f.client.worker_id < 0 ||
      f.client.worker_id >= f.num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "need 0 <= worker index < worker count, got %d and %d (%s)",
        f.client.worker_id, f.num_workers,
        f.spec.has_value() ? f.spec->source
                           : std::string("--worker_index, --num_workers")));
  }
  if (f.max_chunk_bytes < 4) {
    return absl::InvalidArgumentError("--max_chunk_bytes must be >= 4");
  }
  if (f.device == DeviceKind::kCpu && !f.gpus.empty()) {
    return absl::InvalidArgumentError("--gpus needs --device=cuda or auto");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerOptions> ReadWorkerFlags() {
  WorkerOptions f;
  f.task = absl::GetFlag(FLAGS_task);
  DP_RETURN_IF_ERROR(ReadConnection(&f));
  DP_RETURN_IF_ERROR(ReadJob(&f));
  f.trainer.debug_step_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_debug_step_delay_ms));
  f.job_wait_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_wait_timeout_s));
  const MetricsEndpointFlags metrics = MetricsEndpointFromFlags();
  f.metrics_port = metrics.port;
  f.metrics_bind = metrics.bind;
  DP_RETURN_IF_ERROR(Validate(f));
  return f;
}

std::string PositionFileFromFlags() { return absl::GetFlag(FLAGS_position_file); }

}  // namespace downpour
