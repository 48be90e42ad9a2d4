// ps_worker: one Downpour worker replica, or (--task=eval) the evaluation of
// the parameters the servers hold.
//
//   ps_worker --ps_hosts=198.18.0.1:5000,198.18.0.2:5000 --worker_index=0 --num_workers=4
//   ps_worker --ps_hosts=... --gpus=0,1,2,3   # one replica per GPU, one push
//   ps_worker --task=eval --ps_hosts=... --save_params=model.safetensors
//
// Every flag is read here and turned into options structs; nothing below main
// reads a flag. Training, evaluation and the end of a spec job are driven by
// worker/worker_job.h.
#include <optional>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"  // Recovery.
#include "common/malloc_tuning.h"
#include "common/report.h"
#include "common/status_macros.h"
#include "common/train_mode.h"
#include "rpc/security_flags.h"
#include "worker/grpc_ps_client.h"
#include "common/cluster_spec.h"
#include "rpc/net_probe.h"
#include "worker/nn/backend.h"
#include "worker/nn/backend_select.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/model.h"
#include "worker/data_position.h"
#include "worker/trainer.h"
#include "worker/worker_job.h"
#include "worker/worker_metrics.h"

ABSL_FLAG(std::string, ps_hosts, "",
          "Comma-separated host:port of parameter-server shards 0..S-1.");
ABSL_FLAG(int, worker_index, 0, "This worker's index, 0 <= index < num_workers.");
ABSL_FLAG(int, num_workers, 1, "Number of workers in the job.");
ABSL_FLAG(std::string, task, "train", "train, or eval (test accuracy of the "
          "servers' parameters, optionally --save_params).");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Folder with the IDX files (train-images-idx3-ubyte.gz, ...).");
ABSL_FLAG(std::string, model, "fashion_cnn", "Model architecture.");
ABSL_FLAG(std::string, device, "auto",
          "auto, cpu or cuda. auto: CUDA when a GPU is usable, else the CPU "
          "(the log says which and why). cuda refuses to run without a GPU.");
ABSL_FLAG(std::string, gpus, "",
          "Comma-separated GPU ordinals, one replica per entry (0,0 runs two "
          "replicas on GPU 0). Empty: one replica on GPU 0 for --device=cuda.");
// GPU bring-up (issue 17): scheduling of the host thread that waits on the
// GPU.
ABSL_FLAG(bool, cuda_blocking_sync, false,
          "CUDA backend: a synchronizing thread sleeps instead of spinning a "
          "core (cudaDeviceScheduleBlockingSync).");
ABSL_FLAG(int, replicas, 1,
          "CPU replicas in this process (with --device=cpu; --gpus sets the "
          "count on GPUs).");
ABSL_FLAG(std::string, local_aggregation, "sum",
          "With several replicas: sum (average their gradients here and push "
          "once, one worker id) or none (each replica is its own worker, ids "
          "worker_index*R + r of num_workers*R; the servers must be told "
          "num_workers*R).");
ABSL_FLAG(bool, overlap, true,
          "Push and pull in the background while computing the next step.");
ABSL_FLAG(int64_t, part_kb, 1024, "Largest payload of one pull/push call, KiB.");
ABSL_FLAG(int, connections_per_shard, 0,
          "TCP connections to each shard; 0: 2 for a single shard, else 1.");
ABSL_FLAG(int, calls_in_flight, -1,
          "Calls in flight per connection (0: no limit; -1: start at 1 and "
          "size it from measured throughput, worker/adaptive_window.h).");
ABSL_FLAG(std::string, push_dtype, "f32",
          "Gradient encoding on the wire: f32, fp16 or bf16.");
ABSL_FLAG(std::string, pull_dtype, "f32",
          "Parameter encoding on the wire: f32, fp16 or bf16.");
ABSL_FLAG(std::string, dataset, "fashion_mnist",
          "fashion_mnist (IDX files) or cifar10 (binary batches) in --data_dir.");
ABSL_FLAG(int, data_threads, 2, "CPU threads decoding/augmenting batches.");
ABSL_FLAG(bool, augment, false,
          "Random crop (padding --augment_crop_padding) and horizontal flip "
          "of training images.");
ABSL_FLAG(double, label_smoothing, 0.0,
          "Label smoothing of the training loss, in [0, 1): targets "
          "(1 - eps) onehot + eps / classes.");
ABSL_FLAG(int, augment_crop_padding, 4,
          "--augment: pixels of zero padding around the random crop; 0 is "
          "horizontal flips only.");
ABSL_FLAG(std::string, mode, "async",
          "async, sync or ssp: how this worker waits (match the servers).");
ABSL_FLAG(int, epochs, 1, "Passes over this worker's shard of the data.");
ABSL_FLAG(int, batch_size, 64, "Examples per minibatch.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial parameters and shuffling.");
ABSL_FLAG(int, n_fetch, 1, "Pull parameters every n_fetch steps.");
ABSL_FLAG(int, n_push, 1, "Push accrued gradients every n_push steps.");
ABSL_FLAG(double, local_lr, 0.01,
          "Learning rate of the local step between fetches (n_fetch > 1).");
ABSL_FLAG(int64_t, max_train_examples, 0, "Use only the first N training "
          "examples (0: all).");
ABSL_FLAG(int64_t, max_test_examples, 0, "Evaluate only the first N test "
          "examples (0: all).");
ABSL_FLAG(int64_t, max_steps, 0, "Stop after N steps (0: after --epochs).");
ABSL_FLAG(int, log_every, 50, "Print progress every N steps.");
ABSL_FLAG(int64_t, max_chunk_bytes, 1 << 20, "Largest parameter chunk.");
ABSL_FLAG(int, cpu_threads, 1, "Threads of the CPU backend.");
ABSL_FLAG(int, prefetch, 4, "Batches prepared ahead by the input thread.");
// Compute and learning (issue 18): the CPU backend.
ABSL_FLAG(std::string, cpu_backend, "onednn",
          "CPU backend: onednn (oneDNN primitives, the default) or openblas "
          "(im2col + OpenBLAS GEMM, for comparison).");
ABSL_FLAG(double, rpc_timeout_s, 60, "Deadline of one pull or push.");
ABSL_FLAG(double, connect_timeout_s, 60, "How long to wait for the servers.");
// Recovery (issue 14): riding through a shard restart.
ABSL_FLAG(double, reconnect_timeout_s, 120,
          "Keep retrying an unreachable shard this long (backoff up to 2 s) "
          "before failing, so a restarted shard is picked up again.");
ABSL_FLAG(std::string, position_file, "",
          "Recovery: keep this worker's data position (steps taken) in this "
          "file, written after every push and removed when training ends; "
          "a new process of the same worker index, data and job shape "
          "resumes from it instead of beginning its epochs again. launch "
          "--max_restarts sets it to <log_dir>/ckpt/worker<k>.position.");
ABSL_FLAG(int, debug_step_delay_ms, 0,
          "Testing only: sleep this long in every step, to play a straggler.");
ABSL_FLAG(std::string, save_params, "",
          "--task=eval: write the parameters to this safetensors file.");

// Security and operations: the worker's Prometheus endpoint
// (worker/worker_metrics.h; README "Observability").
ABSL_FLAG(int, metrics_port, -1,
          "Prometheus endpoint port (/metrics); -1 off, 0 a free one.");
ABSL_FLAG(std::string, metrics_bind, "127.0.0.1",
          "Address of the Prometheus endpoint.");

// Across machines: the cluster spec (common/cluster_spec.h). With
// --worker_hosts, TF_CONFIG or Slurm's variables the worker takes its
// servers, index and worker count from the spec, and the job ends by itself
// (worker/job_end.h): worker 0 waits for the others, evaluates, writes
// --save_params / --summary_json and stops the servers.
ABSL_FLAG(std::string, worker_hosts, "",
          "Cluster spec: comma-separated host:port of every worker (with "
          "--ps_hosts); worker 0 is the chief.");
ABSL_FLAG(std::string, task_type, "worker", "Cluster spec: ps or worker.");
ABSL_FLAG(int, task_index, 0, "Cluster spec: this task's index in its list.");
ABSL_FLAG(int, num_ps, 1, "Slurm: the first N ranks are servers.");
ABSL_FLAG(int, base_port, 2222,
          "Slurm: a task listens on base_port + its offset on its node.");
ABSL_FLAG(std::string, summary_json, "",
          "Chief of a spec job: write the run's SUMMARY JSON here.");
ABSL_FLAG(double, job_wait_timeout_s, 7200,
          "Chief of a spec job: how long to wait for the other workers.");

namespace downpour {
namespace {

// Recovery (issue 14): graceful stop. SIGTERM or SIGINT sets this; the
// Downpour loop finishes its step, pushes, leaves, and the worker exits 0.
std::atomic<bool> g_stop_requested{false};
void OnStopSignal(int) { g_stop_requested.store(true); }

// Across machines: servers, index and worker count from the spec, if any.
absl::Status ApplySpecFlags(WorkerOptions* f) {
  ClusterSpecInputs in;
  in.ps_hosts = absl::GetFlag(FLAGS_ps_hosts);
  in.worker_hosts = absl::GetFlag(FLAGS_worker_hosts);
  in.task_type = absl::GetFlag(FLAGS_task_type);
  in.task_index = absl::GetFlag(FLAGS_task_index);
  in.num_ps = absl::GetFlag(FLAGS_num_ps);
  in.base_port = absl::GetFlag(FLAGS_base_port);
  DP_ASSIGN_OR_RETURN(f->spec, ResolveClusterSpec(in, ProcessEnvLookup()));
  f->summary_json = absl::GetFlag(FLAGS_summary_json);
  f->job_wait_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_wait_timeout_s));
  if (!f->spec.has_value()) return absl::OkStatus();
  if (f->spec->task_type != TaskType::kWorker) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster spec (", f->spec->source, ") makes this task ps ",
        f->spec->task_index, "; run ps_server, or deploy/node, for it"));
  }
  f->client.hosts = f->spec->ps;
  f->client.worker_id = f->spec->task_index;
  f->num_workers = static_cast<int>(f->spec->workers.size());
  return absl::OkStatus();
}

// The servers, this worker's index, the deadlines and the security options;
// with a cluster spec, its servers, index and worker count.
absl::Status ReadConnectionFlags(WorkerOptions* f) {
  const std::string hosts = absl::GetFlag(FLAGS_ps_hosts);
  f->client.hosts = absl::StrSplit(hosts, ',', absl::SkipEmpty());
  f->client.worker_id = absl::GetFlag(FLAGS_worker_index);
  f->client.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  f->client.connect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  f->client.reconnect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_reconnect_timeout_s));  // Recovery.
  // Security and operations: TLS files and token (rpc/security_flags.h).
  DP_ASSIGN_OR_RETURN(f->client.security, SecurityOptionsFromFlags());
  f->num_workers = absl::GetFlag(FLAGS_num_workers);
  DP_RETURN_IF_ERROR(ApplySpecFlags(f));  // Across machines.
  if (f->client.hosts.empty()) {
    return absl::InvalidArgumentError(
        "--ps_hosts is required (or a cluster spec: --worker_hosts, "
        "TF_CONFIG, Slurm)");
  }
  return absl::OkStatus();
}

// The task, the model and the Downpour loop; ValidateJobFlags checks them.
void ReadTrainingFlags(WorkerOptions* f) {
  f->task = absl::GetFlag(FLAGS_task);
  f->data_dir = absl::GetFlag(FLAGS_data_dir);
  f->model = absl::GetFlag(FLAGS_model);
  f->device = absl::GetFlag(FLAGS_device);
  f->save_params = absl::GetFlag(FLAGS_save_params);
  f->batch_size = absl::GetFlag(FLAGS_batch_size);
  f->epochs = absl::GetFlag(FLAGS_epochs);
  f->cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  f->prefetch = absl::GetFlag(FLAGS_prefetch);
  f->seed = absl::GetFlag(FLAGS_seed);
  f->max_train_examples = absl::GetFlag(FLAGS_max_train_examples);
  f->max_test_examples = absl::GetFlag(FLAGS_max_test_examples);
  f->max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  f->trainer.n_fetch = absl::GetFlag(FLAGS_n_fetch);
  f->trainer.n_push = absl::GetFlag(FLAGS_n_push);
  f->trainer.local_lr = static_cast<float>(absl::GetFlag(FLAGS_local_lr));
  f->trainer.log_every = absl::GetFlag(FLAGS_log_every);
  f->trainer.max_steps = absl::GetFlag(FLAGS_max_steps);
  f->trainer.debug_step_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_debug_step_delay_ms));
  f->trainer.overlap = absl::GetFlag(FLAGS_overlap);
}

// The transport: call sizes, connections, calls in flight, wire encodings.
absl::Status ReadTransportFlags(GrpcClientOptions* client) {
  client->part_bytes = absl::GetFlag(FLAGS_part_kb) << 10;
  client->connections_per_shard = absl::GetFlag(FLAGS_connections_per_shard);
  client->max_calls_in_flight_per_connection =
      absl::GetFlag(FLAGS_calls_in_flight);
  DP_ASSIGN_OR_RETURN(client->push_encoding,
                      wire::ParseEncoding(absl::GetFlag(FLAGS_push_dtype)));
  DP_ASSIGN_OR_RETURN(client->pull_encoding,
                      wire::ParseEncoding(absl::GetFlag(FLAGS_pull_dtype)));
  return absl::OkStatus();
}

// The input pipeline and this process's replicas.
absl::Status ReadDataAndReplicaFlags(WorkerOptions* f) {
  f->dataset = absl::GetFlag(FLAGS_dataset);
  if (f->dataset != "fashion_mnist" && f->dataset != "cifar10") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset must be fashion_mnist or cifar10, got '", f->dataset, "'"));
  }
  f->data_threads = absl::GetFlag(FLAGS_data_threads);
  f->augment = absl::GetFlag(FLAGS_augment);
  f->augment_crop_padding = absl::GetFlag(FLAGS_augment_crop_padding);
  f->label_smoothing = static_cast<float>(absl::GetFlag(FLAGS_label_smoothing));
  if (!(f->label_smoothing >= 0 && f->label_smoothing < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--label_smoothing must be in [0, 1), got ", f->label_smoothing));
  }
  if (f->augment_crop_padding < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--augment_crop_padding must be >= 0, got ", f->augment_crop_padding));
  }
  f->replicas = absl::GetFlag(FLAGS_replicas);
  const std::string agg = absl::GetFlag(FLAGS_local_aggregation);
  if (agg != "sum" && agg != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_aggregation must be sum or none, got '", agg, "'"));
  }
  f->local_sum = agg == "sum";
  for (absl::string_view g :
       absl::StrSplit(absl::GetFlag(FLAGS_gpus), ',', absl::SkipEmpty())) {
    int ordinal;
    if (!absl::SimpleAtoi(g, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus must be a comma-separated list of GPU ordinals, got '",
          absl::GetFlag(FLAGS_gpus), "'"));
    }
    f->gpus.push_back(ordinal);
  }
  if (f->replicas < 1 || f->replicas > 64 || f->data_threads < 1) {
    return absl::InvalidArgumentError(
        "--replicas must be in [1, 64] and --data_threads >= 1");
  }
  return absl::OkStatus();
}

// --mode, and the checks of the task, index, sizes and device.
absl::Status ValidateJobFlags(WorkerOptions* f) {
  auto mode = ParseTrainMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode: ", mode.status().message()));
  }
  f->trainer.mode = *mode;
  if (f->task != "train" && f->task != "eval") {
    return absl::InvalidArgumentError(
        absl::StrCat("--task must be train or eval, got '", f->task, "'"));
  }
  if (f->num_workers < 1 || f->client.worker_id < 0 ||
      f->client.worker_id >= f->num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "need 0 <= --worker_index < --num_workers, got %d and %d",
        f->client.worker_id, f->num_workers));
  }
  if (f->batch_size < 1 || f->epochs < 0 || f->trainer.n_fetch < 1 ||
      f->trainer.n_push < 1 || f->max_chunk_bytes < 4 || f->prefetch < 1) {
    return absl::InvalidArgumentError(
        "--batch_size, --n_fetch, --n_push, --prefetch must be >= 1, "
        "--epochs >= 0, --max_chunk_bytes >= 4");
  }
  if (f->device == "cpu" && !f->gpus.empty()) {
    return absl::InvalidArgumentError("--gpus needs --device=cuda or auto");
  }
  if (f->device != "auto" && f->device != "cpu" && f->device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, got '", f->device, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerOptions> ReadFlags() {
  WorkerOptions f;
  DP_RETURN_IF_ERROR(ReadConnectionFlags(&f));
  ReadTrainingFlags(&f);
  DP_RETURN_IF_ERROR(ReadTransportFlags(&f.client));
  DP_RETURN_IF_ERROR(ReadDataAndReplicaFlags(&f));
  f.cpu_backend = absl::GetFlag(FLAGS_cpu_backend);  // Issue 18.
  f.cuda_blocking_sync = absl::GetFlag(FLAGS_cuda_blocking_sync);  // Issue 17.
  f.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  f.metrics_bind = absl::GetFlag(FLAGS_metrics_bind);
  DP_RETURN_IF_ERROR(ValidateJobFlags(&f));
  return f;
}

// The replicas of this process on the devices chosen here, in main's call
// tree, and passed down (worker/nn/backend_select.h; --device=auto falls back
// to the CPU when the CUDA backend fails to start).
absl::StatusOr<ReplicaSet> BuildReplicas(const WorkerOptions& f) {
  BackendRequest request;
  request.device = f.device;
  request.gpus = f.gpus;
  request.cpu_replicas = f.replicas;
  request.single = f.task == "eval";
  request.cpu_threads = f.cpu_threads;
  request.cpu_backend = f.cpu_backend;  // Issue 18.
  request.cuda.blocking_sync = f.cuda_blocking_sync;
  DP_ASSIGN_OR_RETURN(SelectedBackends selected,
                      SelectBackends(request, RealCudaFactory()));
  std::printf("worker %d: %s\n", f.client.worker_id, selected.note.c_str());
  const int R = static_cast<int>(selected.backends.size());
  const int max_batch = f.task == "eval" ? 500 : f.batch_size;
  ReplicaSet set;
  set.pinned = std::move(selected.pinned);
  set.backends = std::move(selected.backends);
  BuildModelOptions model_options;
  model_options.label_smoothing = f.label_smoothing;
  for (int r = 0; r < R; ++r) {
    DP_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                        BuildModel(f.model, set.backends[r].get(), max_batch,
                                   model_options));
    set.models.push_back(std::move(m));
  }
  return set;
}

// One client, or one per replica when each replica is its own worker; each
// declares the model to the servers.
absl::StatusOr<std::vector<std::unique_ptr<ParameterClient>>> ConnectClients(
    const WorkerOptions& f, const ReplicaSet& set) {
  const int w = f.client.worker_id;
  const int R = static_cast<int>(set.models.size());
  std::vector<std::unique_ptr<ParameterClient>> clients;
  const int num_clients = f.task == "train" && !f.local_sum ? R : 1;
  for (int c = 0; c < num_clients; ++c) {
    GrpcClientOptions co = f.client;
    if (num_clients > 1) co.worker_id = w * R + c;
    DP_ASSIGN_OR_RETURN(std::unique_ptr<ParameterClient> client,
                        NewGrpcParameterClient(co));
    DP_RETURN_IF_ERROR(DeclareModel(client.get(), *set.models[0], f.seed,
                                    static_cast<int>(f.client.hosts.size()),
                                    f.max_chunk_bytes));
    clients.push_back(std::move(client));
  }
  return clients;
}

absl::Status Run() {
  DP_ASSIGN_OR_RETURN(WorkerOptions f, ReadFlags());
  f.trainer.stop_requested = &g_stop_requested;  // Recovery: graceful stop.
  const int w = f.client.worker_id;
  // Recovery: the data position, valid only for this worker of this job
  // shape and data (the key); one loop per file, so not with independent
  // replicas.
  std::optional<DataPositionFile> position;
  const std::string position_file = absl::GetFlag(FLAGS_position_file);
  if (!position_file.empty() && f.task == "train") {
    if (!f.local_sum && f.replicas > 1) {
      std::printf("worker %d: --position_file is not kept with "
                  "--local_aggregation=none (one position per replica)\n", w);
    } else {
      position.emplace(
          position_file,
          absl::StrCat("worker=", w, " workers=", f.num_workers, " replicas=",
                       f.replicas, " seed=", f.seed, " batch=", f.batch_size,
                       " epochs=", f.epochs, " examples=", f.max_train_examples,
                       " dataset=", f.dataset));
      f.trainer.position = &*position;
    }
  }
  if (f.metrics_port >= 0) {
    DP_ASSIGN_OR_RETURN(f.metrics,
                        WorkerMetrics::Start(f.metrics_bind, f.metrics_port));
    std::printf("worker %d: metrics on http://%s:%d/metrics\n", w,
                f.metrics_bind.c_str(), f.metrics->port());
  }
  if (f.spec.has_value()) {  // Across machines: log it; wait for peers' names.
    std::printf("worker %d: %s\n", w, ClusterSpecToString(*f.spec).c_str());
    std::fflush(stdout);
    DP_RETURN_IF_ERROR(WaitForHostNames(
        f.client.hosts, f.client.connect_timeout, [w](const std::string& m) {
          std::printf("worker %d: %s\n", w, m.c_str());
          std::fflush(stdout);
        }));
  }
  DP_ASSIGN_OR_RETURN(ReplicaSet set, BuildReplicas(f));
  DP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ParameterClient>> clients,
                      ConnectClients(f, set));
  if (f.task != "train") return Eval(f, set.models[0].get(), clients[0].get());
  DoneReport done;
  const absl::Status trained = Train(f, set, clients, &done);
  if (!f.spec.has_value() || f.task != "train") return trained;
  return EndSpecJob(f, trained, done, set.models[0].get(), clients[0].get());
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour worker replica (or --task=eval). See README.md.");
  absl::ParseCommandLine(argc, argv);
  downpour::TuneMallocForLargeBuffers();
  // Debian's abseil is built with deadlock detection on: a lock-order graph
  // update on every Mutex acquisition (~1% of the transport's CPU). Tests
  // keep it; the binaries turn it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Recovery (issue 14): SIGTERM/SIGINT stop gracefully (see OnStopSignal).
  struct sigaction stop = {};
  stop.sa_handler = downpour::OnStopSignal;
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  const absl::Status s = downpour::Run();
  if (downpour::g_stop_requested.load()) {
    std::printf("worker %d: stopped by signal after its last step (%s)\n",
                absl::GetFlag(FLAGS_worker_index),
                s.ok() ? "pushed and left" : s.ToString().c_str());
    std::fflush(stdout);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "ps_worker %d: error: %s\n",
                 absl::GetFlag(FLAGS_worker_index), s.ToString().c_str());
  }
  // Recovery: 0 done, 2 fatal (flags), 3 retryable, 1 other
  // (common/exit_codes.h).
  return downpour::ExitCodeForStatus(s);
}
