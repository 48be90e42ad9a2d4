// File: deploy/cluster_plan.h
//
// What a launch runs, decided before anything runs: one TaskSpec per process
// (role, index, host, port, argv, log and port files), built from the
// LaunchOptions alone. Pure: no processes, no filesystem, no clock, so every
// command line can be tested directly, and other placements (Slurm, remote
// hosts) only change the host and the launcher that starts the spec.
//
//   ClusterPlan plan(options, log_dir);
//   for (const TaskSpec& s : plan.Servers()) supervisor.Start(s);
//   ... read each server's port from s.port_file ...
//   std::vector<std::string> ps = {plan.ServerAddress(0, 7000), ...};
//   for (const TaskSpec& w : plan.Workers(ps)) supervisor.Start(w);
//
// Servers listen on port 0 (any free port) and write the port they got to
// their port_file; the workers and evaluations are planned once those ports
// are known. With standbys (LaunchOptions::standby) every address is fixed
// before anything starts: SetSpecPorts gives the loopback ports, the
// servers and standbys take a cluster spec naming them all, and the workers
// and evaluations --ps_standby_hosts.
// Thread-compatible: const methods may run concurrently.
#ifndef DOWNPOUR_DEPLOY_CLUSTER_PLAN_H_
#define DOWNPOUR_DEPLOY_CLUSTER_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deploy/launch_options.h"

namespace downpour {

// Where tasks run unless a plan is given another host: this machine.
inline constexpr char kDefaultHost[] = "127.0.0.1";

// kCurveEval: an evaluation on part of the test set while workers train.
enum class TaskRole { kServer, kWorker, kEval, kCurveEval };

// One process of the cluster.
struct TaskSpec {
  TaskRole role = TaskRole::kServer;
  int index = 0;          // Shard or worker index; 0 for evaluations.
  std::string name;       // "ps 0", "worker 1", "eval", "curve eval": the
                          // prefix of its output lines.
  std::string host;       // Where it runs.
  int port = 0;           // Servers: 0 = any free port, see port_file.
  std::string port_file;  // Servers: where the chosen port is written.
  std::string log_path;   // Every byte of its output.
  std::vector<std::string> argv;  // argv[0] is the binary.
};

// The fixed ports of a job with standbys: shard k's primary and standby,
// and one entry per worker (the spec names every task; workers listen on
// none of them).
struct SpecPorts {
  std::vector<int> ps, standby, workers;
};

class ClusterPlan {
 public:
  // `options` is copied. `log_dir` holds the logs and port files; every task
  // runs on `host`.
  ClusterPlan(const LaunchOptions& options, std::string log_dir,
              std::string host = kDefaultHost);

  // ps_server shards 0..servers-1.
  std::vector<TaskSpec> Servers() const;
  // Fixes every task's port (options.standby); call before the tasks are
  // planned. Precondition: one port per shard, standby and worker.
  void SetSpecPorts(SpecPorts ports) { spec_ports_ = std::move(ports); }
  // The standby of each shard, named "standby <k>" (role kServer, index k);
  // empty without SetSpecPorts.
  std::vector<TaskSpec> Standbys() const;
  // "host:port" of a server listening on `port`.
  std::string ServerAddress(int port) const;
  // Training workers 0..workers-1 against `server_addresses` (shard order).
  std::vector<TaskSpec> Workers(
      const std::vector<std::string>& server_addresses) const;
  // The final evaluation: the whole test set, saving the parameters when
  // options.save_params is set.
  TaskSpec FinalEval(const std::vector<std::string>& server_addresses) const;
  // An evaluation during training on options.eval_examples test examples;
  // saves nothing.
  TaskSpec CurveEval(const std::vector<std::string>& server_addresses) const;
  // Saves the parameters to `path` (after the final evaluation could not
  // write options.save_params), evaluating on a few test examples only.
  TaskSpec SaveEval(const std::vector<std::string>& server_addresses,
                    const std::string& path) const;

  const LaunchOptions& options() const { return options_; }
  const std::string& log_dir() const { return log_dir_; }
  const std::string& host() const { return host_; }

 private:
  // The job's shape for the servers (common/job_flags.h): the workers get
  // the same values in their own argv.
  std::vector<std::string> JobArgs() const;
  TaskSpec Task(TaskRole role, int index, std::string name) const;
  std::vector<std::string> ServerArgv(int shard, const std::string& port_file,
                                      bool standby = false) const;
  // --ps_hosts, --ps_standby_hosts, --worker_hosts, --task_type and
  // --task_index of a server task; empty without SetSpecPorts.
  std::vector<std::string> SpecArgs(int shard, bool standby) const;
  // --ps_standby_hosts for a worker or evaluation; empty without standbys.
  std::vector<std::string> StandbyHostsArgs() const;
  std::string Addresses(const std::vector<int>& ports) const;
  std::vector<std::string> WorkerArgv(int index,
                                      const std::string& ps_hosts) const;
  // `max_test_examples` 0 means the whole test set; `save_params` "" saves
  // nothing.
  std::vector<std::string> EvalArgv(const std::string& ps_hosts,
                                    int64_t max_test_examples,
                                    const std::string& save_params) const;

  const LaunchOptions options_;
  const std::string log_dir_;
  const std::string host_;
  std::optional<SpecPorts> spec_ports_;
};

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_CLUSTER_PLAN_H_
