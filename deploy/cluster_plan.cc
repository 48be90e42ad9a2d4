#include "deploy/cluster_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace downpour {

ClusterPlan::ClusterPlan(const LaunchOptions& options, std::string log_dir,
                         std::string host)
    : options_(options), log_dir_(std::move(log_dir)), host_(std::move(host)) {}

TaskSpec ClusterPlan::Task(TaskRole role, int index, std::string name) const {
  TaskSpec t;
  t.role = role;
  t.index = index;
  t.name = std::move(name);
  t.host = host_;
  std::string file = t.name;
  std::replace(file.begin(), file.end(), ' ', '_');
  t.log_path = absl::StrCat(log_dir_, "/", file, ".log");
  return t;
}

std::vector<std::string> ClusterPlan::JobArgs() const {
  const LaunchOptions& o = options_;
  std::vector<std::string> args = {
      absl::StrCat("--epochs=", o.epochs),
      absl::StrCat("--batch_size=", o.batch_size),
      absl::StrCat("--n_push=", o.n_push),
      absl::StrCat("--data_dir=", o.data_dir),
      absl::StrCat("--replicas=", o.replicas),
      // Worker 0's GPUs: every worker process has as many.
      absl::StrCat("--gpus=", o.WorkerGpus(0)),
      absl::StrCat("--local_aggregation=", o.local_aggregation),
  };
  if (o.max_train_examples > 0) {
    args.push_back(absl::StrCat("--max_train_examples=", o.max_train_examples));
  }
  if (o.dataset != DatasetKind::kFashionMnist) {
    args.push_back(absl::StrCat("--dataset=", DatasetName(o.dataset)));
  }
  return args;
}

std::string ClusterPlan::Addresses(const std::vector<int>& ports) const {
  std::vector<std::string> addresses;
  for (int port : ports) addresses.push_back(ServerAddress(port));
  return absl::StrJoin(addresses, ",");
}

std::vector<std::string> ClusterPlan::SpecArgs(int shard, bool standby) const {
  if (!spec_ports_) return {};
  return {absl::StrCat("--ps_hosts=", Addresses(spec_ports_->ps)),
          absl::StrCat("--ps_standby_hosts=", Addresses(spec_ports_->standby)),
          absl::StrCat("--worker_hosts=", Addresses(spec_ports_->workers)),
          absl::StrCat("--task_type=", standby ? "ps_standby" : "ps"),
          absl::StrCat("--task_index=", shard)};
}

std::vector<std::string> ClusterPlan::StandbyHostsArgs() const {
  if (!spec_ports_) return {};
  return {absl::StrCat("--ps_standby_hosts=", Addresses(spec_ports_->standby))};
}

std::vector<std::string> ClusterPlan::ServerArgv(
    int shard, const std::string& port_file, bool standby) const {
  const LaunchOptions& o = options_;
  // With a spec the server listens on its own entry; --port says the same.
  int port = 0;
  if (spec_ports_) port = (standby ? spec_ports_->standby : spec_ports_->ps)[shard];
  std::vector<std::string> argv = {
      o.ps_server_bin,
      absl::StrCat("--port=", port),
      absl::StrCat("--port_file=", port_file),
      absl::StrCat("--shard_index=", shard),
      absl::StrCat("--num_shards=", o.servers),
      absl::StrCat("--optimizer=", o.optimizer),
      absl::StrCat("--lr=", o.lr),
      absl::StrCat("--mode=", TrainModeName(o.mode)),
      absl::StrCat("--num_workers=", o.ServerWorkers()),
      absl::StrCat("--replicas_to_aggregate=", o.replicas_to_aggregate),
      absl::StrCat("--staleness=", o.staleness),
      absl::StrCat("--staleness_aware=", o.staleness_aware ? "true" : "false"),
      absl::StrCat("--drop_stale_threshold=", o.drop_stale_threshold),
      absl::StrCat("--sync_timeout_s=", o.sync_timeout_s),
      absl::StrCat("--min_replicas=", o.min_replicas),
  };
  // The job's shape, which sizes the servers' learning-rate schedule.
  const std::vector<std::string> job = JobArgs();
  argv.insert(argv.end(), job.begin(), job.end());
  argv.push_back(absl::StrCat("--lr_schedule=", o.lr_schedule));
  argv.insert(argv.end(), o.security_args.begin(), o.security_args.end());
  if (!o.task_cert_dir.empty()) {
    const std::string cert = absl::StrCat(o.task_cert_dir, "/ps-", shard);
    argv.push_back(absl::StrCat("--tls_cert=", cert, ".pem"));
    argv.push_back(absl::StrCat("--tls_key=", cert, ".key"));
    argv.push_back("--require_task_certificates");
  }
  if (o.metrics_base_port >= 0) {  // Standbys after the workers.
    argv.push_back(absl::StrCat(
        "--metrics_port=", o.metrics_base_port + shard +
                               (standby ? o.servers + o.workers : 0)));
  }
  {  // A restarted or resumed shard restores; a standby snapshots apart.
    argv.push_back(absl::StrCat("--checkpoint_dir=", log_dir_,
                                standby ? "/ckpt/standby" : "/ckpt/shard",
                                shard));
    argv.push_back(absl::StrCat("--checkpoint_every_s=",
                                absl::ToDoubleSeconds(o.checkpoint_every)));
  }
  const std::vector<std::string> spec = SpecArgs(shard, standby);
  argv.insert(argv.end(), spec.begin(), spec.end());
  argv.insert(argv.end(), o.forwarded_server_args.begin(),
              o.forwarded_server_args.end());
  argv.insert(argv.end(), o.server_args.begin(), o.server_args.end());
  return argv;
}

std::vector<TaskSpec> ClusterPlan::Servers() const {
  std::vector<TaskSpec> servers;
  for (int k = 0; k < options_.servers; ++k) {
    TaskSpec t = Task(TaskRole::kServer, k, absl::StrCat("ps ", k));
    t.port = spec_ports_ ? spec_ports_->ps[k] : 0;
    t.port_file = absl::StrCat(log_dir_, "/ps_", k, ".port");
    t.argv = ServerArgv(k, t.port_file);
    servers.push_back(std::move(t));
  }
  return servers;
}

std::vector<TaskSpec> ClusterPlan::Standbys() const {
  std::vector<TaskSpec> standbys;
  if (!spec_ports_) return standbys;
  for (int k = 0; k < options_.servers; ++k) {
    TaskSpec t = Task(TaskRole::kServer, k, absl::StrCat("standby ", k));
    t.port = spec_ports_->standby[k];
    t.port_file = absl::StrCat(log_dir_, "/standby_", k, ".port");
    t.argv = ServerArgv(k, t.port_file, /*standby=*/true);
    standbys.push_back(std::move(t));
  }
  return standbys;
}

std::string ClusterPlan::ServerAddress(int port) const {
  return absl::StrCat(host_, ":", port);
}

std::vector<std::string> ClusterPlan::WorkerArgv(
    int index, const std::string& ps_hosts) const {
  const LaunchOptions& o = options_;
  std::vector<std::string> argv = {
      o.ps_worker_bin,
      absl::StrCat("--ps_hosts=", ps_hosts),
      absl::StrCat("--worker_index=", index),
      absl::StrCat("--num_workers=", o.workers),
      "--task=train",
      absl::StrCat("--mode=", TrainModeName(o.mode)),
      absl::StrCat("--epochs=", o.epochs),
      absl::StrCat("--batch_size=", o.batch_size),
      absl::StrCat("--seed=", o.seed),
      absl::StrCat("--data_dir=", o.data_dir),
      absl::StrCat("--n_fetch=", o.n_fetch),
      absl::StrCat("--n_push=", o.n_push),
      absl::StrCat("--device=", o.device),
      absl::StrCat("--gpus=", o.WorkerGpus(index)),
      absl::StrCat("--replicas=", o.replicas),
      absl::StrCat("--local_aggregation=", o.local_aggregation),
      absl::StrCat("--label_smoothing=", o.label_smoothing),
      absl::StrCat("--augment=", o.augment),
  };
  if (o.max_train_examples > 0) {
    argv.push_back(absl::StrCat("--max_train_examples=", o.max_train_examples));
  }
  if (o.dataset != DatasetKind::kFashionMnist) {
    argv.push_back(absl::StrCat("--dataset=", DatasetName(o.dataset)));
  }
  argv.insert(argv.end(), o.security_args.begin(), o.security_args.end());
  const std::vector<std::string> standby_hosts = StandbyHostsArgs();
  argv.insert(argv.end(), standby_hosts.begin(), standby_hosts.end());
  if (!o.task_cert_dir.empty()) {
    const std::string cert = absl::StrCat(o.task_cert_dir, "/worker-", index);
    argv.push_back(absl::StrCat("--tls_cert=", cert, ".pem"));
    argv.push_back(absl::StrCat("--tls_key=", cert, ".key"));
  }
  if (o.metrics_base_port >= 0) {
    argv.push_back(absl::StrCat("--metrics_port=",
                                o.metrics_base_port + o.servers + index));
  }
  // A restarted or resumed worker goes on from its data position (one per
  // process: not with replicas that push on their own).
  if (o.local_aggregation != "none" || o.ReplicasPerWorker() == 1) {
    argv.push_back(absl::StrCat("--position_file=", log_dir_, "/ckpt/worker",
                                index, ".position"));
  }
  argv.insert(argv.end(), o.forwarded_worker_args.begin(),
              o.forwarded_worker_args.end());
  argv.insert(argv.end(), o.worker_args.begin(), o.worker_args.end());
  return argv;
}

std::vector<TaskSpec> ClusterPlan::Workers(
    const std::vector<std::string>& server_addresses) const {
  const std::string ps_hosts = absl::StrJoin(server_addresses, ",");
  std::vector<TaskSpec> workers;
  for (int i = 0; i < options_.workers; ++i) {
    TaskSpec t = Task(TaskRole::kWorker, i, absl::StrCat("worker ", i));
    t.argv = WorkerArgv(i, ps_hosts);
    workers.push_back(std::move(t));
  }
  return workers;
}

std::vector<std::string> ClusterPlan::EvalArgv(
    const std::string& ps_hosts, int64_t max_test_examples,
    const std::string& save_params) const {
  const LaunchOptions& o = options_;
  std::vector<std::string> argv = {
      o.ps_worker_bin,
      "--task=eval",
      absl::StrCat("--mode=", TrainModeName(o.mode)),
      absl::StrCat("--ps_hosts=", ps_hosts),
      absl::StrCat("--data_dir=", o.data_dir),
  };
  if (o.dataset != DatasetKind::kFashionMnist) {
    argv.push_back(absl::StrCat("--dataset=", DatasetName(o.dataset)));
  }
  if (max_test_examples > 0) {
    argv.push_back(absl::StrCat("--max_test_examples=", max_test_examples));
  }
  if (!save_params.empty()) {
    argv.push_back(absl::StrCat("--save_params=", save_params));
  }
  const std::vector<std::string> standby_hosts = StandbyHostsArgs();
  argv.insert(argv.end(), standby_hosts.begin(), standby_hosts.end());
  argv.insert(argv.end(), o.security_args.begin(), o.security_args.end());
  argv.insert(argv.end(), o.forwarded_worker_args.begin(),
              o.forwarded_worker_args.end());
  argv.insert(argv.end(), o.worker_args.begin(), o.worker_args.end());
  return argv;
}

TaskSpec ClusterPlan::FinalEval(
    const std::vector<std::string>& server_addresses) const {
  TaskSpec t = Task(TaskRole::kEval, 0, "eval");
  t.argv = EvalArgv(absl::StrJoin(server_addresses, ","), 0,
                    options_.save_params);
  return t;
}

TaskSpec ClusterPlan::SaveEval(const std::vector<std::string>& server_addresses,
                               const std::string& path) const {
  TaskSpec t = Task(TaskRole::kCurveEval, 0, "save");
  t.argv = EvalArgv(absl::StrJoin(server_addresses, ","), 100, path);
  return t;
}

TaskSpec ClusterPlan::CurveEval(
    const std::vector<std::string>& server_addresses) const {
  TaskSpec t = Task(TaskRole::kCurveEval, 0, "curve eval");
  t.argv = EvalArgv(absl::StrJoin(server_addresses, ","),
                    options_.eval_examples, /*save_params=*/"");
  return t;
}

}  // namespace downpour
