// File: common/cluster_spec.h
//
// Which parameter servers and workers make up a job, and which of them this
// process is, from one of three sources:
//
//  * flags: `--ps_hosts=h1:5000,h2:5000 --worker_hosts=... --task_type=ps
//    --task_index=0` (read in `main`, passed in here as values);
//  * the `TF_CONFIG` environment variable exactly as Kubeflow's TFJob sets it:
//      {"cluster": {"ps": ["h:p", ...], "worker": [...], "chief": [...]},
//       "task": {"type": "ps", "index": 0}, "environment": "cloud"}
//    A chief, if present, is worker 0 and the listed workers follow it;
//  * Slurm: SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
//    SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE
//    (else SLURM_TASKS_PER_NODE). Ranks are placed on the nodes in order
//    (block distribution); the first `num_ps` ranks are servers, the rest
//    workers; a task listens on `base_port` + its offset among the tasks of
//    its node (the scheme of TensorFlow's SlurmClusterResolver). The Slurm
//    parsers (FromSlurm, ExpandSlurmNodeList, ExpandSlurmTasksPerNode) are
//    declared in common/slurm_env.h, part of the same Bazel target.
//
// Explicit flags win over TF_CONFIG, which wins over Slurm. Nothing here reads
// flags, and the environment is read only through the `EnvLookup` passed in,
// so tests inject their own variables. Every malformed input is an
// InvalidArgument naming the flag or variable and what is wrong with it.
//
// Usage (in main):
//   ClusterSpecInputs in;
//   in.ps_hosts = absl::GetFlag(FLAGS_ps_hosts);  ...
//   DP_ASSIGN_OR_RETURN(std::optional<ClusterSpec> spec,
//                       ResolveClusterSpec(in, ProcessEnvLookup()));
//   if (spec) LOG(INFO) << ClusterSpecToString(*spec);
//   else { /* no spec: hand-started process, today's behaviour */ }
#ifndef DOWNPOUR_COMMON_CLUSTER_SPEC_H_
#define DOWNPOUR_COMMON_CLUSTER_SPEC_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

enum class TaskType {
  kPs,      // a parameter-server shard
  kWorker,  // a trainer; worker 0 is the chief
};

// "ps" or "worker".
const char* TaskTypeName(TaskType type);

// "ps" or "worker"; anything else is InvalidArgument naming `what` (e.g.
// "--task_type").
absl::StatusOr<TaskType> ParseTaskType(absl::string_view name,
                                       absl::string_view what = "task type");

// A resolved job. Every address is "host:port" or "[ipv6]:port"; ps[i] is
// shard i, workers[0] is the chief. Valid specs (what every function here
// returns) have at least one server and one worker, a task_index within its
// list and no address twice.
struct ClusterSpec {
  std::vector<std::string> ps;
  std::vector<std::string> workers;
  TaskType task_type = TaskType::kWorker;
  int task_index = 0;
  // Standby shards (server/replication.h): ps_standby[i] replicates shard i,
  // same order as `ps`; empty when the job has none. `standby`: this task
  // is the standby of shard task_index (task type "ps_standby"; task_type
  // is then kPs).
  std::vector<std::string> ps_standby;
  bool standby = false;
  // Where it came from: "flags", "TF_CONFIG" or "slurm".
  std::string source;

  // This task's own entry (ps[task_index], ps_standby[task_index] for a
  // standby, or workers[task_index]).
  // Precondition: the spec is valid.
  const std::string& SelfAddress() const;
  // True for worker 0, the task that ends the job.
  bool IsChief() const {
    return task_type == TaskType::kWorker && task_index == 0;
  }
};

// One line for the start-up log, e.g.
//   cluster spec from TF_CONFIG: this task is worker 2 at w1:2222; 2 ps
//   [p0:2222,p1:2222], 3 workers [c:2222,w0:2222,w1:2222]
std::string ClusterSpecToString(const ClusterSpec& spec);

// Checks the invariants listed on ClusterSpec; errors name `spec.source`.
absl::Status ValidateClusterSpec(const ClusterSpec& spec);

// One "host:port" entry. `host` is a name or IPv4 address, or an IPv6 address
// in brackets ("[::1]:5000"; `host` then keeps the brackets, ready to join
// with ":port" again). Port 1..65535. `what` names the entry in errors.
struct HostPort {
  std::string host;
  int port = 0;
};
absl::StatusOr<HostPort> ParseHostPort(absl::string_view entry,
                                       absl::string_view what = "address");

// "h1:5000,h2:5001" -> {"h1:5000", "h2:5001"}. Spaces around entries are
// dropped; an empty list, an empty entry or a bad entry is InvalidArgument
// naming `what` (e.g. "--ps_hosts") and the entry's position.
absl::StatusOr<std::vector<std::string>> ParseHostList(
    absl::string_view list, absl::string_view what = "host list");

// From the four flags. `task_type` is "ps" or "worker".
absl::StatusOr<ClusterSpec> FromFlags(absl::string_view ps_hosts,
                                      absl::string_view worker_hosts,
                                      absl::string_view task_type,
                                      int task_index);

// From the text of TF_CONFIG (see the file comment). A cluster job
// "evaluator" is ignored; task types "evaluator" and unknown ones, and
// unknown cluster jobs, are refused.
absl::StatusOr<ClusterSpec> FromTfConfig(absl::string_view json_text);

// Looks an environment variable up; nullopt when it is not set.
using EnvLookup =
    std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (getenv).
EnvLookup ProcessEnvLookup();

// The flag values `main` passes to ResolveClusterSpec.
struct ClusterSpecInputs {
  // --ps_hosts / --worker_hosts: comma-separated host:port lists.
  std::string ps_hosts;
  std::string worker_hosts;
  // --ps_standby_hosts: the standby of each shard, same order as ps_hosts
  // (empty: no standbys). A TF_CONFIG job gives them as "ps_standby".
  std::string ps_standby_hosts;
  // --task_type ("ps", "ps_standby" or "worker") and --task_index; used
  // with the lists.
  std::string task_type = "worker";
  int task_index = 0;
  // --num_ps / --base_port: used for Slurm only.
  int num_ps = 1;
  int base_port = 2222;
};

// Picks the source and resolves the spec:
//  1. --worker_hosts given: the flags (then --ps_hosts is required too);
//  2. else --ps_hosts given alone: nullopt (a hand-started process that
//     knows only its servers; explicit flags still win over the environment);
//  3. else TF_CONFIG set and not blank: TF_CONFIG;
//  4. else SLURM_PROCID set and not blank: Slurm;
//  5. else nullopt: no spec, the caller keeps its old behaviour.
// A present but malformed source is an error, never a fall-through.
absl::StatusOr<std::optional<ClusterSpec>> ResolveClusterSpec(
    const ClusterSpecInputs& inputs, const EnvLookup& env);

// The standby address of each shard: the spec's when there is one, else
// --ps_standby_hosts (a hand-started worker); empty when the job has no
// standbys. InvalidArgument when the count differs from `num_shards`.
absl::StatusOr<std::vector<std::string>> ResolveStandbyHosts(
    const ClusterSpecInputs& inputs, const std::optional<ClusterSpec>& spec,
    int num_shards);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_CLUSTER_SPEC_H_
