// ps_server: one parameter-server shard, serving gRPC until SIGINT/SIGTERM.
//
//   ps_server --port=5000 --shard_index=0 --num_shards=2 --optimizer=adagrad --lr=0.05
//
// With --port=0 a free port is chosen; --port_file receives it (written
// atomically once the server accepts calls), which is how deploy:launch and
// the integration tests find their servers.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/atomic_file.h"
#include "common/cluster_spec.h"
#include "common/heap_trimmer.h"  // Hostile input.
#include "common/malloc_tuning.h"
#include "common/sharding.h"  // Hostile input: LayoutLimits.
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "rpc/net_probe.h"
#include "server/job_control.h"
#include "rpc/auth_token.h"
#include "rpc/security_flags.h"
#include "server/ps_host.h"
#include "server/snapshotter.h"  // Recovery.

ABSL_FLAG(int, port, 0, "TCP port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, bind, "",
          "Address to bind (default 127.0.0.1, or with a cluster spec the "
          "host of this task's entry). Use 0.0.0.0 to serve workers on "
          "other hosts.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once serving.");
ABSL_FLAG(int, shard_index, 0, "This server's shard, 0 <= index < num_shards.");
ABSL_FLAG(int, num_shards, 1, "Number of parameter-server shards in the job.");
ABSL_FLAG(std::string, optimizer, "adagrad",
          "Server-side optimizer: sgd, momentum, adagrad or adam.");
ABSL_FLAG(double, lr, 0.05, "Learning rate of the server-side optimizer.");
ABSL_FLAG(double, momentum, 0.9, "Momentum coefficient (--optimizer=momentum).");
ABSL_FLAG(double, adagrad_initial_accumulator, 0.1,
          "Initial Adagrad accumulator (--optimizer=adagrad).");
// Compute and learning (issue 18): learning-rate rules and Adam.
ABSL_FLAG(std::string, lr_decay, "none",
          "Learning-rate decay after the warm-up: none, cosine or step "
          "(keyed to each chunk's update count).");
ABSL_FLAG(int64_t, lr_warmup_updates, 0,
          "Linear warm-up over the first N updates of each chunk (0: none).");
ABSL_FLAG(int64_t, lr_decay_updates, 0,
          "--lr_decay=cosine: the update count where the rate reaches "
          "--lr_min_factor * lr.");
ABSL_FLAG(double, lr_min_factor, 0.0, "--lr_decay=cosine: final rate / lr.");
ABSL_FLAG(int64_t, lr_step_every, 0, "--lr_decay=step: updates per decay.");
ABSL_FLAG(double, lr_step_gamma, 0.1, "--lr_decay=step: factor per decay.");
ABSL_FLAG(std::string, lr_worker_scaling, "none",
          "none, linear or sqrt: sync multiplies lr by k (or sqrt k), the "
          "gradients averaged per step; async/ssp divide it by W (or sqrt W), "
          "--num_workers.");
ABSL_FLAG(double, adam_beta1, 0.9, "--optimizer=adam: first-moment decay.");
ABSL_FLAG(double, adam_beta2, 0.999, "--optimizer=adam: second-moment decay.");
ABSL_FLAG(double, adam_epsilon, 1e-8, "--optimizer=adam: epsilon.");
ABSL_FLAG(double, weight_decay, 0.0,
          "--optimizer=adam: decoupled weight decay (AdamW); 0 is off.");
ABSL_FLAG(std::string, mode, "async",
          "async (Downpour), sync (mean of the step's gradients), or ssp "
          "(stale-synchronous, bounded by --staleness).");
ABSL_FLAG(int, num_workers, 0, "Workers in the job (required for sync/ssp).");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "Sync: gradients per step (0: all workers); fewer gives backup workers.");
ABSL_FLAG(int, staleness, 0, "Ssp: clocks a worker may run ahead of the slowest.");
ABSL_FLAG(bool, staleness_aware, false,
          "Async: divide each update's step by its staleness.");
ABSL_FLAG(int64_t, drop_stale_threshold, 0,
          "Async: drop updates staler than this (0: never).");
ABSL_FLAG(double, sync_timeout_s, 30,
          "Sync/ssp: seconds to wait for a missing worker before going on "
          "without it.");
ABSL_FLAG(int, debug_drop_reply_every, 0,
          "Testing only: replace every Nth Pull/Push/PushPull reply, after "
          "it took effect, by UNAVAILABLE (a reply lost on the network).");
// Security and operations (the TLS and token flags are in
// rpc/security_flags.cc, shared by every binary).
ABSL_FLAG(int, metrics_port, -1,
          "Prometheus endpoint port (/metrics); -1 off, 0 a free one.");
ABSL_FLAG(std::string, metrics_bind, "127.0.0.1",
          "Address of the Prometheus endpoint.");

ABSL_FLAG(int, min_replicas, 1,
          "Sync/ssp: fewest workers to go on with; below it the job aborts.");

// Across machines: the cluster spec (common/cluster_spec.h). With
// --worker_hosts, TF_CONFIG or Slurm's variables the server takes its shard,
// port and worker count from the spec and exits once the job is over.
ABSL_FLAG(std::string, ps_hosts, "",
          "Cluster spec: comma-separated host:port of every server (with "
          "--worker_hosts).");
ABSL_FLAG(std::string, worker_hosts, "",
          "Cluster spec: comma-separated host:port of every worker; worker 0 "
          "is the chief.");
ABSL_FLAG(std::string, task_type, "ps", "Cluster spec: ps or worker.");
ABSL_FLAG(int, task_index, 0, "Cluster spec: this task's index in its list.");
ABSL_FLAG(int, num_ps, 1, "Slurm: the first N ranks are servers.");
ABSL_FLAG(int, base_port, 2222,
          "Slurm: a task listens on base_port + its offset on its node.");

// Hostile input (issue 16): limits on a declared layout (common/sharding.h
// LayoutLimits); far above any real model, refused with INVALID_ARGUMENT.
ABSL_FLAG(int64_t, max_layout_elements, int64_t{1} << 32,
          "Most float32 elements a declared model may have, over all shards.");
ABSL_FLAG(int64_t, max_layout_tensors, int64_t{1} << 16,
          "Most tensors a declared model may have.");
ABSL_FLAG(int64_t, max_layout_rank, 32,
          "Most dimensions one declared tensor may have.");
ABSL_FLAG(int64_t, max_layout_chunks, int64_t{1} << 18,
          "Most chunks a declared model may be cut into, over all shards.");
ABSL_FLAG(int64_t, max_layout_shards, 4096,
          "Most shards a declared layout may be cut for.");
ABSL_FLAG(int64_t, max_layout_chunk_bytes, int64_t{1} << 30,
          "Largest max_chunk_bytes a declaration may ask for.");
// Hostile input (issue 16): what many large concurrent calls may hold.
ABSL_FLAG(int64_t, grpc_memory_quota_mb,
          downpour::kDefaultMemoryQuotaBytes >> 20,
          "gRPC resource quota over transport buffers (MiB; 0: no limit). "
          "Peak resident memory stays near this + the store + ~60 MiB; past "
          "it gRPC resets calls (RESOURCE_EXHAUSTED) or connections "
          "(UNAVAILABLE), which workers retry after a backoff.");
ABSL_FLAG(int64_t, heap_trim_min_mb, 64,
          "Give free heap memory back to the system when the shard has seen "
          "no pull or push for 2 s and at least this much (MiB) is free and "
          "was taken since the last time, e.g. by refused oversize messages "
          "(0: never; common/heap_trimmer.h).");
ABSL_FLAG(int, max_streams_per_connection,
          downpour::kDefaultMaxConcurrentStreams,
          "Concurrent calls per client connection (0: gRPC's default); more "
          "wait.");

// Recovery (issue 14): snapshots and restore (server/snapshotter.h).
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Folder of this shard's snapshots: restored at start, written every "
          "--checkpoint_every_s and on SIGTERM. Empty: no snapshots.");
ABSL_FLAG(double, checkpoint_every_s, 30,
          "Seconds between snapshots (0: only on SIGTERM).");
ABSL_FLAG(int64_t, debug_snapshot_crash_after_bytes, -1,
          "Testing only: exit(86) after writing this many bytes of a snapshot.");

namespace {

absl::Notification* g_stop = nullptr;  // Set only in main, for the handler.

void HandleSignal(int) {
  // Notify() is not async-signal-safe in general; a self-pipe would be, but
  // the only other thread touching it waits on it. Keep the handler minimal.
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

// Atomically, so a reader polling `path` never sees a partial port.
absl::Status WritePortFile(const std::string& path, int port) {
  return downpour::AtomicWriteFile(path, absl::StrCat(port, "\n"));
}

// Compute and learning (issue 18): the schedule, Adam's constants and the
// rate scaled for the workers (mode and worker count already set).
absl::Status LrRulesFromFlags(downpour::ParameterStoreOptions* options) {
  downpour::OptimizerOptions& o = options->optimizer;
  o.schedule.decay = absl::GetFlag(FLAGS_lr_decay);
  o.schedule.warmup_updates = absl::GetFlag(FLAGS_lr_warmup_updates);
  o.schedule.decay_updates = absl::GetFlag(FLAGS_lr_decay_updates);
  o.schedule.min_factor = static_cast<float>(absl::GetFlag(FLAGS_lr_min_factor));
  o.schedule.step_every = absl::GetFlag(FLAGS_lr_step_every);
  o.schedule.step_gamma = static_cast<float>(absl::GetFlag(FLAGS_lr_step_gamma));
  o.adam_beta1 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta1));
  o.adam_beta2 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta2));
  o.adam_epsilon = static_cast<float>(absl::GetFlag(FLAGS_adam_epsilon));
  o.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  const std::string scaling = absl::GetFlag(FLAGS_lr_worker_scaling);
  if (scaling == "none") return absl::OkStatus();
  const bool aggregated = options->mode == downpour::TrainMode::kSync;
  const int workers = aggregated && options->replicas_to_aggregate > 0
                          ? options->replicas_to_aggregate
                          : options->num_workers;
  absl::StatusOr<float> lr =
      downpour::ScaleLearningRate(o.learning_rate, scaling, aggregated, workers);
  if (!lr.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_worker_scaling: ", lr.status().message()));
  }
  o.learning_rate = *lr;
  return absl::OkStatus();
}

// Hostile input (issue 16): the --max_layout_* flags, checked.
absl::Status LayoutLimitsFromFlags(downpour::LayoutLimits* limits) {
  limits->max_total_elements = absl::GetFlag(FLAGS_max_layout_elements);
  limits->max_tensors = absl::GetFlag(FLAGS_max_layout_tensors);
  limits->max_rank = absl::GetFlag(FLAGS_max_layout_rank);
  limits->max_chunks = absl::GetFlag(FLAGS_max_layout_chunks);
  const int64_t shards = absl::GetFlag(FLAGS_max_layout_shards);
  if (shards < 1 || shards > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_layout_shards must be in [1, 1048576], got ", shards));
  }
  limits->max_shards = static_cast<int32_t>(shards);
  limits->max_chunk_bytes = absl::GetFlag(FLAGS_max_layout_chunk_bytes);
  absl::Status valid = downpour::ValidateLayoutLimits(*limits);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_layout_*: ", valid.message()));
  }
  return absl::OkStatus();
}

// Hostile input (issue 16) and the listening address: the transport limits,
// the port and the testing-only reply drops.
absl::Status TransportFromFlags(
    downpour::ParameterServerHostOptions* host_options) {
  const int64_t quota_mb = absl::GetFlag(FLAGS_grpc_memory_quota_mb);
  host_options->limits.max_concurrent_streams =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  host_options->limits.memory_quota_bytes = quota_mb << 20;
  if (quota_mb < 0 || quota_mb > (int64_t{1} << 30) ||
      host_options->limits.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(
        "--grpc_memory_quota_mb must be in [0, 2^30] and "
        "--max_streams_per_connection >= 0");
  }
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", port));
  }
  host_options->service.debug_drop_reply_every =
      absl::GetFlag(FLAGS_debug_drop_reply_every);
  if (host_options->service.debug_drop_reply_every < 0) {
    return absl::InvalidArgumentError("--debug_drop_reply_every must be >= 0");
  }
  host_options->listen_addresses = {
      absl::StrCat(absl::GetFlag(FLAGS_bind).empty() ? "127.0.0.1"
                                                     : absl::GetFlag(FLAGS_bind),
                   ":", port)};
  return absl::OkStatus();
}

// Across machines: the cluster-spec flags (common/cluster_spec.h).
downpour::ClusterSpecInputs ClusterSpecInputsFromFlags() {
  downpour::ClusterSpecInputs in;
  in.ps_hosts = absl::GetFlag(FLAGS_ps_hosts);
  in.worker_hosts = absl::GetFlag(FLAGS_worker_hosts);
  in.task_type = absl::GetFlag(FLAGS_task_type);
  in.task_index = absl::GetFlag(FLAGS_task_index);
  in.num_ps = absl::GetFlag(FLAGS_num_ps);
  in.base_port = absl::GetFlag(FLAGS_base_port);
  return in;
}

// The host's options from the flags; InvalidArgument with the message to
// print for a bad flag (the store checks the rest of its options).
absl::StatusOr<downpour::ParameterServerHostOptions> HostOptionsFromFlags(
    std::optional<downpour::ClusterSpec>* spec) {
  downpour::ParameterServerHostOptions host_options;
  downpour::ParameterStoreOptions& options = host_options.store;
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.optimizer.name = absl::GetFlag(FLAGS_optimizer);
  options.optimizer.learning_rate = static_cast<float>(absl::GetFlag(FLAGS_lr));
  options.optimizer.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  options.optimizer.adagrad_initial_accumulator =
      static_cast<float>(absl::GetFlag(FLAGS_adagrad_initial_accumulator));
  auto mode = downpour::ParseTrainMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode: ", mode.status().ToString()));
  }
  options.mode = *mode;
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  options.staleness = absl::GetFlag(FLAGS_staleness);
  options.staleness_aware = absl::GetFlag(FLAGS_staleness_aware);
  options.drop_stale_threshold = absl::GetFlag(FLAGS_drop_stale_threshold);
  options.sync_timeout = absl::Seconds(absl::GetFlag(FLAGS_sync_timeout_s));
  options.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  DP_RETURN_IF_ERROR(LrRulesFromFlags(&options));  // Issue 18.
  DP_RETURN_IF_ERROR(LayoutLimitsFromFlags(&options.layout_limits));
  DP_RETURN_IF_ERROR(TransportFromFlags(&host_options));
  // Across machines: a spec overrides shard, shards, workers and address.
  DP_ASSIGN_OR_RETURN(*spec, downpour::ResolveClusterSpec(
                                 ClusterSpecInputsFromFlags(),
                                 downpour::ProcessEnvLookup()));
  if (spec->has_value()) {
    DP_RETURN_IF_ERROR(downpour::ApplyClusterSpec(
        **spec, absl::GetFlag(FLAGS_bind), &host_options));
  }
  // Security and operations.
  DP_ASSIGN_OR_RETURN(host_options.security, downpour::SecurityOptionsFromFlags());
  // One token check for the host's services and job control.
  DP_ASSIGN_OR_RETURN(host_options.authenticator,
                      downpour::TokenAuthenticator::Create(host_options.security));
  host_options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  host_options.metrics_bind = absl::GetFlag(FLAGS_metrics_bind);
  return host_options;
}

// Everything the server takes from its flags, read once in main; nothing
// below reads a flag.
struct ServerFlags {
  downpour::ParameterServerHostOptions host;
  std::optional<downpour::ClusterSpec> spec;  // Across machines.
  double lr = 0;  // --lr as given (host.store holds it scaled for workers).
  std::string port_file;
  // Recovery: snapshots and restore; an empty dir turns both off. The log
  // is set by Serve.
  downpour::SnapshotterOptions snapshots;
  int64_t heap_trim_min_mb = 0;  // Hostile input: common/heap_trimmer.h.
};

absl::StatusOr<ServerFlags> ReadServerFlags() {
  ServerFlags flags;
  DP_ASSIGN_OR_RETURN(flags.host, HostOptionsFromFlags(&flags.spec));
  flags.lr = absl::GetFlag(FLAGS_lr);
  flags.port_file = absl::GetFlag(FLAGS_port_file);
  flags.snapshots.dir = absl::GetFlag(FLAGS_checkpoint_dir);
  flags.snapshots.every =
      absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_s));
  flags.snapshots.write.debug_crash_after_bytes =
      absl::GetFlag(FLAGS_debug_snapshot_crash_after_bytes);
  flags.heap_trim_min_mb = absl::GetFlag(FLAGS_heap_trim_min_mb);
  if (flags.heap_trim_min_mb < 0 || flags.heap_trim_min_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--heap_trim_min_mb must be in [0, 2^30]");
  }
  return flags;
}

// Across machines: a job from a spec ends itself (server/job_control.h).
// Outlives the host, which serves `service`.
struct SpecJob {
  std::unique_ptr<downpour::JobState> state;  // Null without a spec.
  std::unique_ptr<grpc::Service> service;
  std::atomic<downpour::ParameterStore*> store{nullptr};  // Set once serving.
};

// Logs the spec and adds the job-control service to the host's services.
void AttachJobControl(const ServerFlags& flags, SpecJob* job,
                      downpour::ParameterServerHostOptions* host_options) {
  const downpour::ParameterStoreOptions& options = host_options->store;
  std::printf("ps_server: %s\n",
              downpour::ClusterSpecToString(*flags.spec).c_str());
  job->state = std::make_unique<downpour::JobState>(
      options.num_workers, options.optimizer.name, flags.lr);
  std::atomic<downpour::ParameterStore*>* job_store = &job->store;
  job->service = downpour::NewJobControlService(job->state.get(), [job_store] {
    downpour::ParameterStore* store = job_store->load();
    return store == nullptr ? std::string() : store->Stats().aborted;
  }, host_options->authenticator.get());
  host_options->extra_services.push_back(job->service.get());
}

// Recovery: the log line of a restore or snapshot of this shard.
std::function<void(const std::string&)> RecoveryLog(int shard_index) {
  return [shard_index](const std::string& m) {
    std::printf("ps_server: shard %d: %s\n", shard_index, m.c_str());
    std::fflush(stdout);
  };
}

// Says why the host could not start; returns the exit code. Unavailable:
// the address could not be listened on (exit 1); anything else is a bad flag
// (exit 2).
int ReportStartFailure(const absl::Status& status,
                       const std::vector<std::string>& listen_addresses) {
  const bool listen_failed = status.code() == absl::StatusCode::kUnavailable;
  // Across machines: say why (gRPC does not).
  const absl::Status why =
      listen_failed ? downpour::ProbeListen(listen_addresses[0])
                    : absl::OkStatus();
  std::fprintf(stderr, "ps_server: %s\n",
               !why.ok() ? std::string(why.message()).c_str()
               : listen_failed ? std::string(status.message()).c_str()
                               : status.ToString().c_str());
  return listen_failed ? 1 : 2;
}

// Logs where the shard serves and writes --port_file; false (logged) when
// the port file could not be written.
bool AnnounceServing(downpour::ParameterServerHost* host,
                     const ServerFlags& flags) {
  const downpour::ParameterStoreOptions& options = flags.host.store;
  const int bound_port = host->port();
  if (host->metrics_port() >= 0) {  // Security and operations.
    std::printf("ps_server: metrics on http://%s:%d/metrics\n",
                flags.host.metrics_bind.c_str(), host->metrics_port());
  }
  // Compute and learning (issue 18): the schedule, when there is one.
  const downpour::LrSchedule& sched = options.optimizer.schedule;
  std::string schedule;
  if (sched.warmup_updates > 0) {
    schedule += absl::StrCat(", warm-up ", sched.warmup_updates, " updates");
  }
  if (sched.decay == "cosine") {
    schedule += absl::StrCat(", cosine to ", sched.min_factor, "x at ",
                             sched.decay_updates, " updates");
  } else if (sched.decay == "step") {
    schedule += absl::StrCat(", x", sched.step_gamma, " every ",
                             sched.step_every, " updates");
  }
  if (options.optimizer.weight_decay > 0) {
    schedule += absl::StrCat(", weight decay ", options.optimizer.weight_decay);
  }
  std::printf(
      "ps_server: shard %d of %d (%s mode, %s, lr %g%s) listening on %s\n",
      options.shard_index, options.num_shards,
      downpour::TrainModeName(options.mode), options.optimizer.name.c_str(),
      options.optimizer.learning_rate, schedule.c_str(),
      host->address().c_str());
  std::fflush(stdout);
  if (!flags.port_file.empty()) {
    const absl::Status written = WritePortFile(flags.port_file, bound_port);
    if (!written.ok()) {
      std::fprintf(stderr, "ps_server: could not write --port_file %s: %s\n",
                   flags.port_file.c_str(),
                   std::string(written.message()).c_str());
      return false;
    }
  }
  return true;
}

// Blocks until SIGINT/SIGTERM or, for a spec job, until the job is over.
downpour::JobEnd WaitUntilDone(SpecJob* job, downpour::ParameterStore* store,
                               int shard_index, absl::Notification* stop) {
  downpour::JobEnd end;
  if (job->state != nullptr) {
    job->store.store(store);
    end = downpour::WaitForJobEnd(job->state.get(), *store, stop);
    std::printf("ps_server: shard %d: %s\n", shard_index, end.reason.c_str());
  } else {
    stop->WaitForNotification();
  }
  return end;
}

// Stops the host, writes the final snapshot, logs the shard's counters;
// returns the exit code.
int StopShard(downpour::ParameterServerHost* host,
              downpour::Snapshotter* snapshotter,
              const std::function<void(const std::string&)>& recovery_log,
              int shard_index, const downpour::JobEnd& end) {
  // Waiting pulls are answered first, then the server stops.
  host->Shutdown(absl::Seconds(2));
  host->Wait();
  if (snapshotter != nullptr) {  // Recovery: the final snapshot, drained.
    snapshotter->Stop();
    absl::Status s = snapshotter->WriteNow();
    if (!s.ok()) recovery_log(absl::StrCat("final snapshot failed: ", s.message()));
  }
  const downpour::ShardStats stats = host->store()->Stats();
  std::printf("ps_server: shard %d stopped: %s\n", shard_index,
              downpour::ShardStatsToJson(stats).c_str());
  if (end.exit_code != 0) {
    std::fprintf(stderr, "ps_server: shard %d: exiting with status %d: %s\n",
                 shard_index, end.exit_code, end.reason.c_str());
  }
  return end.exit_code;
}

// Serves until stopped; returns the exit code.
int Serve(ServerFlags* flags) {
  downpour::ParameterServerHostOptions& host_options = flags->host;
  const downpour::ParameterStoreOptions& options = host_options.store;
  SpecJob job;  // Across machines.
  if (flags->spec.has_value()) AttachJobControl(*flags, &job, &host_options);
  // Recovery: restore before serving; snapshots while serving.
  const std::function<void(const std::string&)> recovery_log =
      RecoveryLog(options.shard_index);
  const std::string checkpoint_dir = flags->snapshots.dir;
  if (!checkpoint_dir.empty()) {
    host_options.prepare_store = [checkpoint_dir, shard = options.shard_index,
                                  shards = options.num_shards, recovery_log](
                                     downpour::ParameterStore* store) {
      return downpour::RestoreLatestSnapshot(checkpoint_dir, shard, shards,
                                             store, recovery_log);
    };
  }
  auto host = downpour::ParameterServerHost::Create(host_options);
  if (!host.ok()) {
    return ReportStartFailure(host.status(), host_options.listen_addresses);
  }
  if (!AnnounceServing(host->get(), *flags)) {
    (*host)->Shutdown();
    return 1;
  }
  // Hostile input (issue 16): memory a burst took (refused oversize
  // messages, a load spike) goes back once the shard is idle.
  downpour::HeapTrimmerOptions trim;
  trim.min_free_bytes = flags->heap_trim_min_mb << 20;
  trim.activity = [store = (*host)->store()] {
    const downpour::ShardStats s = store->Stats();
    return s.pulls + s.pushes_applied + s.pushes_duplicate;
  };
  downpour::HeapTrimmer trimmer(std::move(trim));
  std::unique_ptr<downpour::Snapshotter> snapshotter;  // Recovery.
  if (!checkpoint_dir.empty()) {
    downpour::SnapshotterOptions so = flags->snapshots;
    so.log = recovery_log;
    snapshotter = std::make_unique<downpour::Snapshotter>(so, (*host)->store());
  }
  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGINT, HandleSignal);
  std::signal(SIGTERM, HandleSignal);
  const downpour::JobEnd end =
      WaitUntilDone(&job, (*host)->store(), options.shard_index, &stop);
  return StopShard(host->get(), snapshotter.get(), recovery_log,
                   options.shard_index, end);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour parameter-server shard. See README.md for the flags.");
  absl::ParseCommandLine(argc, argv);
  downpour::TuneMallocForLargeBuffers();
  // Debian's abseil is built with deadlock detection on: a lock-order graph
  // update on every Mutex acquisition (~1% of the transport's CPU). Tests
  // keep it; the binaries turn it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<ServerFlags> flags = ReadServerFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "ps_server: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  return Serve(&*flags);
}
