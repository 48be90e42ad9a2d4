#include "common/cluster_spec_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, ps_hosts, "",
          "Comma-separated host:port of parameter-server shards 0..S-1. Alone "
          "(a worker started by hand) it names the servers; with "
          "--worker_hosts it is the cluster spec's ps list.");
ABSL_FLAG(std::string, worker_hosts, "",
          "Cluster spec: comma-separated host:port of every worker (with "
          "--ps_hosts); worker 0 is the chief.");
ABSL_FLAG(std::string, ps_standby_hosts, "",
          "Comma-separated host:port of each shard's standby (same order as "
          "--ps_hosts): every process of a job with standby shards is given "
          "it (docs/design.md, Standby shards).");
ABSL_FLAG(std::string, task_type, "",
          "Cluster spec: ps, ps_standby or worker (default: ps for "
          "ps_server, worker for ps_worker).");
ABSL_FLAG(int, task_index, 0, "Cluster spec: this task's index in its list.");
ABSL_FLAG(int, num_ps, 1, "Slurm: the first N ranks are servers.");
ABSL_FLAG(int, base_port, downpour::ClusterSpecInputs{}.base_port,
          "Slurm: a task listens on base_port + its offset on its node.");
ABSL_FLAG(int, num_workers, 0,
          "Workers in a job started without a cluster spec (a spec gives its "
          "own count). Required by ps_server, in every mode: it bounds what "
          "a shard keeps per worker. 0: not given (a worker counts 1).");

namespace downpour {

ClusterSpecInputs ClusterSpecInputsFromFlags(absl::string_view default_task_type) {
  ClusterSpecInputs in;
  in.ps_hosts = absl::GetFlag(FLAGS_ps_hosts);
  in.worker_hosts = absl::GetFlag(FLAGS_worker_hosts);
  in.ps_standby_hosts = absl::GetFlag(FLAGS_ps_standby_hosts);
  in.task_type = absl::GetFlag(FLAGS_task_type);
  if (in.task_type.empty()) in.task_type = std::string(default_task_type);
  in.task_index = absl::GetFlag(FLAGS_task_index);
  in.num_ps = absl::GetFlag(FLAGS_num_ps);
  in.base_port = absl::GetFlag(FLAGS_base_port);
  return in;
}

int NumWorkersFromFlags() { return absl::GetFlag(FLAGS_num_workers); }

const std::vector<std::string>& ClusterSpecFlagNames() {
  static const auto* names = new std::vector<std::string>{
      "ps_hosts", "worker_hosts", "task_type", "task_index", "num_ps",
      "base_port", "ps_standby_hosts"};
  return *names;
}

}  // namespace downpour
