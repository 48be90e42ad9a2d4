// ps_worker: one Downpour worker replica, or (--task=eval) the evaluation of
// the parameters the servers hold.
//
//   ps_worker --ps_hosts=198.18.0.1:5000,198.18.0.2:5000 --worker_index=0 --num_workers=4
//   ps_worker --ps_hosts=... --gpus=0,1,2,3   # one replica per GPU, one push
//   ps_worker --task=eval --ps_hosts=... --save_params=model.safetensors
//
// The flags are read by worker/worker_flags.h into a WorkerOptions; nothing
// below main reads a flag. Training, evaluation and the end of a spec job are driven by
// worker/worker_job.h.
#include <optional>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster_spec.h"
#include "common/command_line.h"
#include "common/exit_codes.h"
#include "common/output_paths.h"
#include "common/process_setup.h"
#include "common/report.h"
#include "common/status_macros.h"
#include "rpc/net_probe.h"
#include "worker/grpc_ps_client.h"
#include "worker/nn/backend.h"
#include "worker/nn/backend_select.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/data_position.h"
#include "worker/model_files.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"
#include "worker/worker_job.h"
#include "worker/worker_metrics.h"

namespace downpour {
namespace {

// Graceful stop. SIGTERM or SIGINT sets this; the Downpour loop finishes
// its step, pushes, leaves, and the worker exits 0.
std::atomic<bool> g_stop_requested{false};

// This worker's index once its flags are read (the spec's or
// --worker_index), for main's last lines.
std::atomic<int> g_worker_index{0};

// What the process is doing, for a stop signal: in kTraining the trainer
// finishes its step, pushes and leaves; in any other state nothing is in
// flight that a stop could lose, so the process says so and exits at once.
enum class Phase : int {
  kStarting,
  kResolving,
  kLoading,
  kWaiting,
  kTraining,
  kEvaluating,
  kEnding,
};
std::atomic<Phase> g_phase{Phase::kStarting};

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kStarting:
      return "starting";
    case Phase::kResolving:
      return "resolving the servers' names";
    case Phase::kLoading:
      return "loading the model and the data";
    case Phase::kWaiting:
      return "waiting for the servers";
    case Phase::kTraining:
      return "training";
    case Phase::kEvaluating:
      return "evaluating";
    case Phase::kEnding:
      return "ending the job";
  }
  return "starting";
}

// Runs on the stop signal's thread.
void OnStop(int signal) {
  g_stop_requested.store(true);
  const Phase phase = g_phase.load();
  if (phase == Phase::kTraining) return;  // The trainer stops after its step.
  std::fflush(stdout);
  std::printf("worker %d: stopped by signal %d while %s\n",
              g_worker_index.load(), signal, PhaseName(phase));
  std::fflush(stdout);
  // Retryable: the job can go on once the worker is started again.
  _exit(kExitRetryable);
}

// An evaluation lays the model out as its servers' job does: deferred
// weight gradients (--defer_weight_gradients) only for a sync job. Servers
// that do not answer leave it as it is (the declaration then says why).
void FollowServersMode(WorkerOptions* f) {
  if (f->task != WorkerTask::kEval || !f->defer_weight_gradients) return;
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      NewGrpcParameterClient(f->client);
  if (!client.ok()) return;
  absl::StatusOr<std::vector<ShardStats>> stats = (*client)->Stats();
  if (stats.ok() && !stats->empty()) {
    f->defer_weight_gradients = stats->front().mode == "sync";
  }
}

// The replicas of this process on the devices chosen here, in main's call
// tree, and passed down (worker/nn/backend_select.h; --device=auto falls back
// to the CPU when the CUDA backend fails to start).
absl::StatusOr<ReplicaSet> BuildReplicas(const WorkerOptions& f) {
  BackendRequest request;
  request.device = f.device;
  request.gpus = f.gpus;
  request.cpu_replicas = f.replicas;
  request.single = f.task == WorkerTask::kEval;
  request.cpu_threads = f.cpu_threads;
  request.cpu_backend = f.cpu_backend;
  request.cuda.blocking_sync = f.cuda_blocking_sync;
  request.cuda.deterministic_conv_algorithms = f.cuda_deterministic;
  DP_ASSIGN_OR_RETURN(SelectedBackends selected,
                      SelectBackends(request, RealCudaFactory()));
  std::printf("worker %d: %s\n", f.client.worker_id, selected.note.c_str());
  const int R = static_cast<int>(selected.backends.size());
  const int max_batch = f.task == WorkerTask::kEval ? 500 : f.batch_size;
  ReplicaSet set;
  set.pinned = std::move(selected.pinned);
  set.backends = std::move(selected.backends);
  DP_ASSIGN_OR_RETURN(const ResolvedModel spec, LoadModel(f.model));
  for (int r = 0; r < R; ++r) {
    BuildModelOptions model_options;
    model_options.label_smoothing = f.label_smoothing;
    model_options.defer_weight_gradients = f.defer_weight_gradients;
    model_options.dropout_seed =
        f.seed * 0x9E3779B97F4A7C15ull + f.client.worker_id * R + r;
    DP_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                        BuildModel(spec, set.backends[r].get(), max_batch,
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
  const int num_clients = f.task == WorkerTask::kTrain && !f.local_sum ? R : 1;
  // --init_from: the declared values, and the replicas' running statistics.
  std::optional<InitialValues> initial;
  if (!f.init_from.empty() && f.task == WorkerTask::kTrain) {
    DP_ASSIGN_OR_RETURN(initial, ReadInitFrom(f.init_from, *set.models[0]));
    if (!initial->state.empty()) {
      for (const auto& m : set.models) DP_RETURN_IF_ERROR(m->SetState(initial->state));
    }
    std::printf("worker %d: initial parameters from %s\n", w,
                f.init_from.c_str());
  }
  for (int c = 0; c < num_clients; ++c) {
    GrpcClientOptions co = f.client;
    if (num_clients > 1) co.worker_id = w * R + c;
    DP_ASSIGN_OR_RETURN(std::unique_ptr<ParameterClient> client,
                        NewGrpcParameterClient(co));
    DP_RETURN_IF_ERROR(DeclareModel(
        client.get(), *set.models[0], f.seed,
        static_cast<int>(f.client.hosts.size()), f.max_chunk_bytes,
        initial.has_value() ? &initial->parameters : nullptr));
    clients.push_back(std::move(client));
  }
  return clients;
}

absl::Status Run() {
  DP_ASSIGN_OR_RETURN(WorkerOptions f, ReadWorkerFlags());
  f.trainer.stop_requested = &g_stop_requested;  // Graceful stop.
  const int w = f.client.worker_id;
  g_worker_index.store(w);
  // The files this process writes (an evaluation its parameters, the chief
  // of a spec job those and the summary, a training worker its position),
  // checked before any work.
  const bool chief = f.spec.has_value() && w == 0;
  if (f.task == WorkerTask::kEval || chief) {
    DP_RETURN_IF_ERROR(PrepareOutputFile("save_params", f.save_params));
  }
  if (chief) {
    DP_RETURN_IF_ERROR(PrepareOutputFile("summary_json", f.summary_json));
  }
  if (f.task == WorkerTask::kTrain) {
    DP_RETURN_IF_ERROR(
        PrepareOutputFile("position_file", PositionFileFromFlags()));
  }
  f.client.stop_requested = &g_stop_requested;
  f.client.on_wait = [w](const std::string& m) {
    std::printf("worker %d: %s\n", w, m.c_str());
    std::fflush(stdout);
  };
  f.client.on_note = f.client.on_wait;
  // The data position, valid only for this worker of this job
  // shape and data (the key); one loop per file, so not with independent
  // replicas.
  std::optional<DataPositionFile> position;
  const std::string position_file = PositionFileFromFlags();
  if (!position_file.empty() && f.task == WorkerTask::kTrain) {
    if (!f.local_sum && f.replicas > 1) {
      std::printf("worker %d: --position_file is not kept with "
                  "--local_aggregation=none (one position per replica)\n", w);
    } else {
      position.emplace(
          position_file,
          absl::StrCat("worker=", w, " workers=", f.num_workers, " replicas=",
                       f.replicas, " seed=", f.seed, " batch=", f.batch_size,
                       " epochs=", f.epochs, " examples=", f.max_train_examples,
                       " dataset=", DatasetName(f.dataset)));
      f.trainer.position = &*position;
    }
  }
  if (f.metrics_port >= 0) {
    DP_ASSIGN_OR_RETURN(f.metrics,
                        WorkerMetrics::Start(f.metrics_bind, f.metrics_port));
    std::printf("worker %d: metrics on http://%s:%d/metrics\n", w,
                f.metrics_bind.c_str(), f.metrics->port());
  }
  if (f.spec.has_value()) {  // Log it; wait for peers' names.
    std::printf("worker %d: %s\n", w, ClusterSpecToString(*f.spec).c_str());
    std::fflush(stdout);
    g_phase.store(Phase::kResolving);
    DP_RETURN_IF_ERROR(WaitForHostNames(
        f.client.hosts, f.client.connect_timeout, [w](const std::string& m) {
          std::printf("worker %d: %s\n", w, m.c_str());
          std::fflush(stdout);
        }));
  }
  g_phase.store(Phase::kLoading);
  FollowServersMode(&f);
  DP_ASSIGN_OR_RETURN(ReplicaSet set, BuildReplicas(f));
  std::unique_ptr<ExampleSource> train;
  if (f.task == WorkerTask::kTrain) {
    DP_ASSIGN_OR_RETURN(train, OpenTrainingData(f, *set.models[0]));
  }
  g_phase.store(Phase::kWaiting);
  DP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ParameterClient>> clients,
                      ConnectClients(f, set));
  if (f.task == WorkerTask::kEval) {
    g_phase.store(Phase::kEvaluating);
    return Eval(f, set.models[0].get(), clients[0].get());
  }
  DoneReport done;
  g_phase.store(Phase::kTraining);
  if (g_stop_requested.load()) {  // A signal just before the switch.
    return absl::CancelledError("stopped before the first step");
  }
  const absl::Status trained = Train(f, set, std::move(train), clients, &done);
  if (!f.spec.has_value()) return trained;
  g_phase.store(Phase::kEnding);
  return EndSpecJob(f, trained, done, set.models[0].get(), clients[0].get());
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour worker replica (or --task=eval). See README.md.");
  downpour::ParseCommandLineOrExit(argc, argv);  // --help: 0; a bad flag: 2.
  downpour::SetUpProcess();
  // SIGTERM/SIGINT: while training, the trainer finishes its step, pushes it
  // and leaves (it polls g_stop_requested); in any other phase the worker
  // says which and exits 3 at once (OnStop).
  downpour::StopSignal::Options stop_options;
  stop_options.on_stop = &downpour::OnStop;
  absl::StatusOr<std::unique_ptr<downpour::StopSignal>> stop =
      downpour::StopSignal::Install(std::move(stop_options));
  if (!stop.ok()) {
    std::fprintf(stderr, "ps_worker: error: %s\n",
                 stop.status().ToString().c_str());
    return downpour::ExitCodeForStatus(stop.status());
  }
  // oneDNN's JIT GEMM kernels (Debian's libdnnl 2.x) point rsp into a heap
  // workspace while they run, so a signal handled on a thread inside one
  // writes its frame into the heap (oneDNN issue #4845). SIGINT and SIGTERM
  // are therefore blocked here, after Install started its watcher thread with
  // them unblocked: every thread started from now on inherits the block, and
  // only the watcher, which never computes, runs the handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const absl::Status s = downpour::Run();
  if ((*stop)->requested()->load()) {
    if (downpour::g_phase.load() == downpour::Phase::kTraining && s.ok()) {
      std::printf("worker %d: stopped by signal after its last step (pushed "
                  "and left)\n", downpour::g_worker_index.load());
    } else {
      std::printf("worker %d: stopped by signal while %s (%s)\n",
                  downpour::g_worker_index.load(),
                  downpour::PhaseName(downpour::g_phase.load()),
                  s.ok() ? "done" : s.ToString().c_str());
    }
    std::fflush(stdout);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "ps_worker %d: error: %s\n",
                 downpour::g_worker_index.load(), s.ToString().c_str());
  }
  // 0 done, 2 fatal (flags), 3 retryable, 1 other
  // (common/exit_codes.h).
  return downpour::ExitCodeForStatus(s);
}
