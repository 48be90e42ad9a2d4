// File: deploy/cluster_plan_test.cc
//
// Every task's role, name, host, files and command line, without starting
// anything.
#include "deploy/cluster_plan.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

LaunchOptions Options() {
  LaunchOptions o;
  o.servers = 2;
  o.workers = 2;
  o.epochs = 2;
  o.batch_size = 32;
  o.lr = 0.05;
  o.optimizer = "sgd";
  o.seed = 7;
  o.data_dir = "/data";
  o.ps_server_bin = "/bin/ps_server";
  o.ps_worker_bin = "/bin/ps_worker";
  o.max_train_examples = 640;
  o.server_args = {"--extra_server=1"};
  o.worker_args = {"--extra_worker=2"};
  o.save_params = "/out/p.safetensors";
  o.eval_examples = 500;
  return o;
}

std::string Args(const TaskSpec& t) { return absl::StrJoin(t.argv, " "); }

TEST(ClusterPlanTest, ServersListenOnAnyPortAndReportIt) {
  const ClusterPlan plan(Options(), "/logs");
  const std::vector<TaskSpec> servers = plan.Servers();
  ASSERT_EQ(servers.size(), 2u);
  const TaskSpec& s = servers[1];
  EXPECT_EQ(s.role, TaskRole::kServer);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.name, "ps 1");
  EXPECT_EQ(s.host, kDefaultHost);
  EXPECT_EQ(s.port, 0);
  EXPECT_EQ(s.port_file, "/logs/ps_1.port");
  EXPECT_EQ(s.log_path, "/logs/ps_1.log");
  EXPECT_EQ(Args(s),
            "/bin/ps_server --port=0 --port_file=/logs/ps_1.port "
            "--shard_index=1 --num_shards=2 --optimizer=sgd --lr=0.05 "
            "--mode=async --num_workers=2 --replicas_to_aggregate=0 "
            "--staleness=2 --staleness_aware=false --drop_stale_threshold=0 "
            "--sync_timeout_s=30 --min_replicas=1 --epochs=2 --batch_size=32 "
            "--n_push=1 --data_dir=/data --replicas=1 --gpus= "
            "--local_aggregation=sum --max_train_examples=640 "
            "--lr_schedule=auto --checkpoint_dir=/logs/ckpt/shard1 "
            "--checkpoint_every_s=2 --extra_server=1");
  EXPECT_EQ(plan.ServerAddress(7001), "127.0.0.1:7001");
}

TEST(ClusterPlanTest, WorkersAndEvaluationsUseTheServerAddresses) {
  LaunchOptions o = Options();
  o.mode = TrainMode::kSync;
  const ClusterPlan plan(o, "/logs", "198.18.0.5");
  const std::vector<std::string> ps = {"198.18.0.5:7000", "198.18.0.5:7001"};
  const std::vector<TaskSpec> workers = plan.Workers(ps);
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[1].name, "worker 1");
  EXPECT_EQ(workers[1].host, "198.18.0.5");
  EXPECT_EQ(workers[1].log_path, "/logs/worker_1.log");
  EXPECT_EQ(Args(workers[1]),
            "/bin/ps_worker --ps_hosts=198.18.0.5:7000,198.18.0.5:7001 "
            "--worker_index=1 --num_workers=2 --task=train --mode=sync "
            "--epochs=2 --batch_size=32 --seed=7 --data_dir=/data "
            "--n_fetch=1 --n_push=1 --device=auto --gpus= --replicas=1 "
            "--local_aggregation=sum --label_smoothing=0 --augment=flip "
            "--max_train_examples=640 "
            "--position_file=/logs/ckpt/worker1.position --extra_worker=2");
  const TaskSpec eval = plan.FinalEval(ps);
  EXPECT_EQ(eval.role, TaskRole::kEval);
  EXPECT_EQ(eval.name, "eval");
  EXPECT_EQ(Args(eval),
            "/bin/ps_worker --task=eval --mode=sync "
            "--ps_hosts=198.18.0.5:7000,198.18.0.5:7001 --data_dir=/data "
            "--save_params=/out/p.safetensors --extra_worker=2");
  const TaskSpec curve = plan.CurveEval(ps);
  EXPECT_EQ(curve.role, TaskRole::kCurveEval);
  EXPECT_EQ(curve.log_path, "/logs/curve_eval.log");
  EXPECT_EQ(Args(curve),
            "/bin/ps_worker --task=eval --mode=sync "
            "--ps_hosts=198.18.0.5:7000,198.18.0.5:7001 --data_dir=/data "
            "--max_test_examples=500 --extra_worker=2");
}

TEST(ClusterPlanTest, ReplicasThatPushAloneCountAsServerWorkers) {
  LaunchOptions o = Options();
  o.gpus = "0,1,2,3";
  o.local_aggregation = "none";
  o.max_train_examples = 0;
  const ClusterPlan plan(o, "/logs");
  EXPECT_THAT(Args(plan.Servers()[0]), ::testing::HasSubstr(" --num_workers=4 "));
  const std::string w = Args(plan.Workers({"h:1"})[0]);
  EXPECT_THAT(w, ::testing::HasSubstr(" --num_workers=2 "));
  EXPECT_THAT(w, ::testing::HasSubstr(" --gpus=0,1 "));
  EXPECT_THAT(w, ::testing::Not(::testing::HasSubstr("--max_train_examples")));
}

// The GPUs of the job each worker process gets, and the count the servers see.
std::vector<std::string> WorkerGpuArgs(const LaunchOptions& o) {
  std::vector<std::string> out;
  const ClusterPlan plan(o, "/logs");
  for (const TaskSpec& t : plan.Workers({"h:1"})) {
    for (const std::string& a : t.argv) {
      if (a.rfind("--gpus=", 0) == 0) out.push_back(a);
    }
  }
  return out;
}

TEST(ClusterPlanTest, EachWorkerProcessGetsItsOwnGpus) {
  LaunchOptions o = Options();  // 2 workers.
  o.gpus = "0,1";
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=0", "--gpus=1"));
  EXPECT_THAT(Args(ClusterPlan(o, "/logs").Servers()[0]),
              ::testing::HasSubstr(" --gpus=0 "));  // One replica each.
  o.gpus = "0,1,2,3";
  EXPECT_THAT(WorkerGpuArgs(o),
              ::testing::ElementsAre("--gpus=0,1", "--gpus=2,3"));
  o.gpus = "0,1";
  o.gpus_per_worker = 2;  // Both processes on both GPUs, on purpose.
  EXPECT_THAT(WorkerGpuArgs(o),
              ::testing::ElementsAre("--gpus=0,1", "--gpus=0,1"));
  o.gpus = "0";
  o.gpus_per_worker = 0;  // More processes than GPUs: one each, shared.
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=0", "--gpus=0"));
  o.workers = 1;
  o.gpus = "0,0";  // One process, two replicas on GPU 0.
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=0,0"));
}

TEST(ClusterPlanTest, AMultiGpuHostSpreadsTheProcessesByDefault) {
  LaunchOptions o = Options();
  o.host_gpus = 2;
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=0", "--gpus=1"));
  o.workers = 1;  // One process with all of them.
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=0,1"));
  o.workers = 2;
  o.device = "cpu";
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=", "--gpus="));
  o.device = "auto";
  o.host_gpus = 1;  // A single GPU: as before, each process on GPU 0.
  EXPECT_THAT(WorkerGpuArgs(o), ::testing::ElementsAre("--gpus=", "--gpus="));
}

// --augment and --label_smoothing reach the workers as ps_worker's flags.
TEST(ClusterPlanTest, AugmentAndLabelSmoothingReachTheWorkers) {
  LaunchOptions o = Options();
  o.augment = "none";
  o.label_smoothing = 0.1;
  std::string w = Args(ClusterPlan(o, "/logs").Workers({"h:1"})[0]);
  EXPECT_THAT(w, ::testing::HasSubstr(" --label_smoothing=0.1"));
  EXPECT_THAT(w, ::testing::HasSubstr(" --augment=none "));
  o.augment = "crop_flip";
  w = Args(ClusterPlan(o, "/logs").Workers({"h:1"})[0]);
  EXPECT_THAT(w, ::testing::HasSubstr(" --augment=crop_flip "));
  EXPECT_THAT(w, ::testing::Not(::testing::HasSubstr("--augment_crop_padding")));
  o.augment = "flip";
  w = Args(ClusterPlan(o, "/logs").Workers({"h:1"})[0]);
  EXPECT_THAT(w, ::testing::HasSubstr(" --augment=flip "));
}

// Every child gets the security flags; servers
// and workers their own metrics port; evaluations none.
// The job's shape reaches the servers, which size their schedule from it,
// and the shared flags given to the launcher reach their children as given.
TEST(ClusterPlanTest, JobShapeToServersAndGivenFlagsPassedOn) {
  LaunchOptions o = Options();
  o.dataset = DatasetKind::kCifar10;
  o.forwarded_server_args = {"--momentum=0.5"};
  o.forwarded_worker_args = {"--part_kb=64"};
  const ClusterPlan plan(o, "/logs");
  const std::string server = Args(plan.Servers()[0]);
  EXPECT_THAT(server, ::testing::HasSubstr(" --dataset=cifar10 "));
  EXPECT_THAT(server, ::testing::HasSubstr(" --momentum=0.5 --extra_server=1"));
  const std::string worker = Args(plan.Workers({"h:1"})[0]);
  EXPECT_THAT(worker, ::testing::HasSubstr(" --dataset=cifar10 "));
  EXPECT_THAT(worker, ::testing::HasSubstr(" --part_kb=64 --extra_worker=2"));
  EXPECT_THAT(Args(plan.FinalEval({"h:1"})),
              ::testing::HasSubstr(" --dataset=cifar10 "));
}

TEST(ClusterPlanTest, SecurityFlagsToEveryChildAndOneMetricsPortEach) {
  LaunchOptions o = Options();
  o.security_args = {"--tls_ca=/c/ca.pem", "--auth_token_file=/c/token"};
  o.metrics_base_port = 9400;
  const ClusterPlan plan(o, "/logs");
  const std::vector<TaskSpec> servers = plan.Servers();
  const std::vector<TaskSpec> workers = plan.Workers({"h:1", "h:2"});
  EXPECT_THAT(Args(servers[1]), testing::HasSubstr(
      "--tls_ca=/c/ca.pem --auth_token_file=/c/token --metrics_port=9401 "
      "--checkpoint_dir=/logs/ckpt/shard1 --checkpoint_every_s=2 "
      "--extra_server=1"));
  EXPECT_THAT(Args(workers[1]), testing::HasSubstr(
      "--tls_ca=/c/ca.pem --auth_token_file=/c/token --metrics_port=9403 "
      "--position_file=/logs/ckpt/worker1.position --extra_worker=2"));
  const std::string eval = Args(plan.FinalEval({"h:1", "h:2"}));
  EXPECT_THAT(eval, testing::HasSubstr("--auth_token_file=/c/token"));
  EXPECT_THAT(eval, testing::Not(testing::HasSubstr("--metrics_port")));
  o.metrics_base_port = -1;
  EXPECT_THAT(Args(ClusterPlan(o, "/logs").Servers()[0]),
              testing::Not(testing::HasSubstr("--metrics_port")));
}

// --secure: each task presents its own certificate after the job-wide
// flags, and the servers require them; the evaluation keeps the job's.
TEST(ClusterPlanTest, EachTaskPresentsItsOwnCertificate) {
  LaunchOptions o = Options();
  o.security_args = {"--tls_cert=/c/server.pem", "--tls_key=/c/server.key",
                     "--tls_ca=/c/ca.pem"};
  o.task_cert_dir = "/c";
  const ClusterPlan plan(o, "/logs");
  EXPECT_THAT(Args(plan.Servers()[1]), testing::HasSubstr(
      "--tls_ca=/c/ca.pem --tls_cert=/c/ps-1.pem --tls_key=/c/ps-1.key "
      "--require_task_certificates"));
  const std::string worker = Args(plan.Workers({"h:1", "h:2"})[1]);
  EXPECT_THAT(worker, testing::HasSubstr(
      "--tls_ca=/c/ca.pem --tls_cert=/c/worker-1.pem --tls_key=/c/worker-1.key"));
  const std::string eval = Args(plan.FinalEval({"h:1", "h:2"}));
  EXPECT_THAT(eval, testing::HasSubstr("--tls_cert=/c/server.pem"));
  EXPECT_THAT(eval, testing::Not(testing::HasSubstr("worker-")));
}

TEST(ClusterPlanTest, StandbysAndEveryTaskShareOneSpecOfFixedPorts) {
  LaunchOptions o = Options();
  o.standby = true;
  o.metrics_base_port = 9000;
  ClusterPlan plan(o, "/logs");
  EXPECT_TRUE(plan.Standbys().empty());  // No ports yet.
  plan.SetSpecPorts({{7000, 7001}, {7100, 7101}, {7200, 7201}});
  const std::string spec =
      "--ps_hosts=127.0.0.1:7000,127.0.0.1:7001 "
      "--ps_standby_hosts=127.0.0.1:7100,127.0.0.1:7101 "
      "--worker_hosts=127.0.0.1:7200,127.0.0.1:7201";
  const TaskSpec primary = plan.Servers()[1];
  EXPECT_EQ(primary.port, 7001);
  EXPECT_THAT(Args(primary), ::testing::StartsWith("/bin/ps_server --port=7001 "));
  EXPECT_THAT(Args(primary), ::testing::HasSubstr(
                                 spec + " --task_type=ps --task_index=1"));
  EXPECT_THAT(Args(primary), ::testing::HasSubstr("--metrics_port=9001 "));
  const std::vector<TaskSpec> standbys = plan.Standbys();
  ASSERT_EQ(standbys.size(), 2u);
  const TaskSpec& s = standbys[1];
  EXPECT_EQ(s.role, TaskRole::kServer);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.name, "standby 1");
  EXPECT_EQ(s.port, 7101);
  EXPECT_EQ(s.port_file, "/logs/standby_1.port");
  EXPECT_EQ(s.log_path, "/logs/standby_1.log");
  EXPECT_THAT(Args(s), ::testing::StartsWith(
                           "/bin/ps_server --port=7101 "
                           "--port_file=/logs/standby_1.port --shard_index=1 "));
  EXPECT_THAT(Args(s), ::testing::HasSubstr(
                           spec + " --task_type=ps_standby --task_index=1"));
  // After the servers' and workers' metrics ports; its own snapshots.
  EXPECT_THAT(Args(s), ::testing::HasSubstr("--metrics_port=9005 "));
  EXPECT_THAT(Args(s),
              ::testing::HasSubstr("--checkpoint_dir=/logs/ckpt/standby1 "));
  const std::vector<std::string> ps = {"127.0.0.1:7000", "127.0.0.1:7001"};
  const std::string standby_hosts =
      "--ps_standby_hosts=127.0.0.1:7100,127.0.0.1:7101";
  EXPECT_THAT(Args(plan.Workers(ps)[0]), ::testing::HasSubstr(standby_hosts));
  EXPECT_THAT(Args(plan.FinalEval(ps)), ::testing::HasSubstr(standby_hosts));
  EXPECT_THAT(Args(plan.CurveEval(ps)), ::testing::HasSubstr(standby_hosts));
  EXPECT_THAT(Args(plan.SaveEval(ps, "/x")),
              ::testing::HasSubstr(standby_hosts));
  // Without standbys nothing of this appears.
  const ClusterPlan plain(Options(), "/logs");
  EXPECT_THAT(Args(plain.Workers(ps)[0]),
              ::testing::Not(::testing::HasSubstr("standby")));
  EXPECT_THAT(Args(plain.Servers()[0]),
              ::testing::Not(::testing::HasSubstr("--task_type")));
}

}  // namespace
}  // namespace downpour
