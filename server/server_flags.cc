#include "server/server_flags.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec_flags.h"
#include "common/job_flags.h"
#include "common/job_identity.h"
#include "common/metrics_flags.h"
#include "common/status_macros.h"
#include "rpc/auth_token.h"
#include "rpc/security_flags.h"
#include "server/job_control.h"
#include "server/store_flags.h"
#include "worker/data/dataset_info.h"

ABSL_FLAG(int, port, 0, "TCP port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, bind, "",
          "Address to bind (default 127.0.0.1, or with a cluster spec the "
          "host of this task's entry). Use 0.0.0.0 to serve workers on "
          "other hosts.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once serving.");
ABSL_FLAG(int, shard_index, 0, "This server's shard, 0 <= index < num_shards.");
ABSL_FLAG(int, num_shards, 1, "Number of parameter-server shards in the job.");
ABSL_FLAG(int, debug_drop_reply_every, 0,
          "Testing only: replace every Nth Pull/Push/PushPull reply, after "
          "it took effect, by UNAVAILABLE (a reply lost on the network).");
// Limits on a declared layout (common/sharding.h LayoutLimits); far above
// any real model, refused with INVALID_ARGUMENT.
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
ABSL_FLAG(int, max_connections, 0,
          "Most client connections to this shard; above it the ones silent "
          "longest are closed (server/connection_guard.h). 0: 64 + 16 per "
          "worker, at most half the file-descriptor limit.");
ABSL_FLAG(int, max_streams_per_connection,
          downpour::kDefaultMaxConcurrentStreams,
          "Concurrent calls per client connection (0: gRPC's default); more "
          "wait.");

// Snapshots and restore (server/snapshotter.h).
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Folder of this shard's snapshots: restored at start, written every "
          "--checkpoint_every_s and on SIGTERM. Empty: no snapshots.");
ABSL_FLAG(bool, start_empty_if_snapshots_unusable, false,
          "When --checkpoint_dir holds snapshots of this shard but none can "
          "be used (corrupt, truncated, refused values), start the shard "
          "empty instead of exiting with the reason (exit 2).");
ABSL_FLAG(int64_t, debug_snapshot_crash_after_bytes, -1,
          "Testing only: exit(86) after writing this many bytes of a snapshot.");

namespace {

// The most workers a shard takes (--num_workers).
constexpr int kMaxServerWorkers = 1 << 16;

// The --max_layout_* flags, checked.
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

// The transport limits, the listening address and the testing-only reply
// drops.
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


// The job's shape as this shard sees it, for the learning-rate rules:
// nullopt (with a warning) when the training set cannot be counted here.
std::optional<downpour::JobShape> JobShapeFor(
    const downpour::JobFlags& job, const downpour::ParameterStoreOptions& o) {
  absl::StatusOr<int64_t> examples = downpour::CountTrainingExamples(
      job.dataset, job.data_dir, job.max_train_examples);
  if (!examples.ok()) {
    std::fprintf(stderr,
                 "ps_server: warning: no learning-rate schedule (cannot count "
                 "the training examples: %s)\n",
                 std::string(examples.status().message()).c_str());
    return std::nullopt;
  }
  downpour::JobShape shape;
  shape.mode = job.mode;
  shape.replicas_per_worker = job.ReplicasPerWorker();
  shape.local_sum = job.local_sum;
  // The servers count every replica as a worker when each pushes alone.
  shape.workers = std::max(1, job.local_sum
                                  ? o.num_workers
                                  : o.num_workers / shape.replicas_per_worker);
  shape.batch_size = job.batch_size;
  shape.epochs = job.epochs;
  shape.n_push = job.n_push;
  shape.train_examples = *examples;
  return shape;
}

}  // namespace

namespace downpour {

absl::StatusOr<ServerFlags> ReadServerFlags() {
  ServerFlags flags;
  ParameterServerHostOptions& host_options = flags.host;
  ParameterStoreOptions& options = host_options.store;
  DP_ASSIGN_OR_RETURN(const JobFlags job, JobFlagsFromFlags());
  DP_ASSIGN_OR_RETURN(const StoreFlags store, StoreFlagsFromFlags());
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.mode = job.mode;
  options.num_workers = NumWorkersFromFlags();
  DP_RETURN_IF_ERROR(LayoutLimitsFromFlags(&options.layout_limits));
  DP_RETURN_IF_ERROR(TransportFromFlags(&host_options));
  // A spec overrides shard, shards, workers and address.
  DP_ASSIGN_OR_RETURN(flags.spec,
                      ResolveClusterSpec(ClusterSpecInputsFromFlags("ps"),
                                         ProcessEnvLookup()));
  if (flags.spec.has_value()) {
    DP_RETURN_IF_ERROR(
        ApplyClusterSpec(*flags.spec, absl::GetFlag(FLAGS_bind), &host_options));
  }
  // What a shard keeps per worker (dedup rows, ssp clocks) is bounded by
  // the job's worker count, so every shard must know it.
  if (options.num_workers < 1 || options.num_workers > kMaxServerWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_workers is required (the job's workers, ids 0..W-1; a cluster "
        "spec gives it) and must be in [1, ", kMaxServerWorkers, "], got ",
        options.num_workers));
  }
  std::optional<JobShape> shape;
  if (store.lr_schedule_auto) shape = JobShapeFor(job, options);
  DP_RETURN_IF_ERROR(ApplyStoreFlags(store, shape, &options));
  flags.lr = store.store.optimizer.learning_rate > 0
                 ? store.store.optimizer.learning_rate
                 : DefaultLearningRate(options.optimizer.name);
  DP_ASSIGN_OR_RETURN(host_options.security, SecurityOptionsFromFlags());
  // One token check for the host's services and job control.
  DP_ASSIGN_OR_RETURN(host_options.authenticator,
                      TokenAuthenticator::Create(host_options.security));
  const MetricsEndpointFlags metrics = MetricsEndpointFromFlags();
  host_options.metrics_port = metrics.port;
  host_options.metrics_bind = metrics.bind;
  flags.port_file = absl::GetFlag(FLAGS_port_file);
  flags.snapshots.dir = absl::GetFlag(FLAGS_checkpoint_dir);
  JobIdentity identity;
  identity.shards = options.num_shards;
  identity.workers = options.num_workers;
  identity.mode = job.mode;
  identity.epochs = job.epochs;
  identity.batch_size = job.batch_size;
  identity.n_push = job.n_push;
  identity.dataset = job.dataset;
  identity.max_train_examples = job.max_train_examples;
  identity.replicas_per_worker = job.ReplicasPerWorker();
  identity.local_sum = job.local_sum;
  flags.job_identity = JobIdentityText(identity);
  flags.snapshots.every = store.checkpoint_every;
  flags.snapshots.start_empty_if_unusable =
      absl::GetFlag(FLAGS_start_empty_if_snapshots_unusable);
  flags.snapshots.write.debug_crash_after_bytes =
      absl::GetFlag(FLAGS_debug_snapshot_crash_after_bytes);
  flags.max_connections = absl::GetFlag(FLAGS_max_connections);
  if (flags.max_connections < 0) {
    return absl::InvalidArgumentError("--max_connections must be >= 0");
  }
  flags.heap_trim_min_mb = absl::GetFlag(FLAGS_heap_trim_min_mb);
  if (flags.heap_trim_min_mb < 0 || flags.heap_trim_min_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--heap_trim_min_mb must be in [0, 2^30]");
  }
  return flags;
}

}  // namespace downpour
