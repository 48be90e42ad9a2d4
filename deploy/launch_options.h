// File: deploy/launch_options.h
//
// Every tunable of the cluster launcher in one struct, and its validation.
// deploy/launch_main.cc maps one flag to each field and parses --mode with
// ParseModeFlag; everything below main takes the struct.
//
//   LaunchOptions o;
//   DP_ASSIGN_OR_RETURN(o.mode, ParseModeFlag(flag_value));
//   DP_RETURN_IF_ERROR(ValidateLaunchOptions(o));
//
// Plain data and pure functions (ValidateLaunchOptions stats data_dir and
// the binaries); thread-compatible.
#ifndef DOWNPOUR_DEPLOY_LAUNCH_OPTIONS_H_
#define DOWNPOUR_DEPLOY_LAUNCH_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/dataset_kind.h"
#include "common/train_mode.h"

namespace downpour {

// Every tunable of the launcher. launch_main.cc fills it from its own flags
// and from the flag libraries it shares with ps_server and ps_worker
// (common/job_flags.h, server/store_flags.h, worker/training_flags.h,
// worker/backend_flags.h, worker/transport_flags.h), whose defaults are the
// children's own; the defaults below only serve code that builds the
// struct itself (tests).
struct LaunchOptions {
  int servers = 2;                 // Parameter-server shards, >= 1.
  int workers = 2;                 // Training worker processes, >= 1.
  // Compute devices of the worker processes: "auto", "cpu" or "cuda", and
  // the job's GPUs on this host, dealt among the worker processes
  // gpus_per_worker at a time (one replica per entry; "0,0" is two replicas
  // on GPU 0): worker i gets entries i*K .. i*K+K-1, modulo the list's
  // length. gpus_per_worker 0: the list split evenly (a list longer than
  // the workers must divide among them), or one each when the workers
  // outnumber it. Empty gpus on a host with host_gpus >= 2 (device not
  // cpu): the list 0..host_gpus-1, so the processes spread over the GPUs
  // instead of all using GPU 0. Otherwise one replica (or `replicas` CPU
  // replicas) per process.
  std::string device = "auto";
  std::string gpus;
  int gpus_per_worker = 0;
  int host_gpus = 0;  // GPUs this host shows (launch counts them).
  int replicas = 1;
  // Worker `index`'s --gpus ("" for none), per the rule above.
  std::string WorkerGpus(int index) const;
  // Replicas of one process: "sum" (one push of their mean gradient) or
  // "none" (each replica is a worker of its own, as far as servers know).
  std::string local_aggregation = "sum";
  // Replicas per worker process (from the GPUs dealt, or replicas).
  int ReplicasPerWorker() const;
  // The job's GPU list (gpus, or the host's default) and how many entries
  // each worker process gets.
  std::vector<std::string> JobGpus() const;
  int GpusPerWorker() const;
  // A line for the user when this rule puts two or more worker processes
  // on one GPU without --gpus_per_worker asking for it (a host with one
  // GPU, a --gpus list shorter than the workers, or one that repeats a
  // GPU): one process with a replica for each entry ran faster. Empty
  // otherwise.
  std::string SharedGpuNote() const;
  // Workers the servers see: workers, times the replicas when each replica
  // pushes on its own.
  int ServerWorkers() const {
    return local_aggregation == "none" ? workers * ReplicasPerWorker() : workers;
  }
  // kAsync (Downpour), kSync (the servers aggregate a step's gradients
  // from replicas_to_aggregate workers before applying them) or kSsp
  // (stale-synchronous: no worker runs more than `staleness` steps ahead of
  // the slowest). Passed to servers, workers and the evaluations as --mode.
  TrainMode mode = TrainMode::kAsync;
  // The six below are passed to every server as the flags of the same name;
  // ps_server documents their exact semantics.
  int replicas_to_aggregate = 0;   // sync: gradients per step; 0 = all
                                   // workers, fewer = backup workers.
                                   // In [0, workers].
  int staleness = 2;               // ssp: clocks a worker may run ahead of
                                   // the slowest; >= 0.
  bool staleness_aware = false;    // async only: divide each update's step
                                   // by its staleness.
  int64_t drop_stale_threshold = 0;  // async: drop updates staler than
                                     // this; 0 = never; >= 0.
  double sync_timeout_s = 30;      // sync/ssp: seconds to wait for a missing
                                   // worker before going on without it; > 0.
  int min_replicas = 1;            // sync/ssp: fewest workers to go on with;
                                   // below it the job aborts. In [1, workers].
  int epochs = 3;                  // Passed to workers, >= 1.
  int batch_size = 64;             // Passed to workers, >= 1.
  double lr = 0.001;               // Passed to servers.
  std::string optimizer = "adam";  // Passed to servers.
  // "auto": the servers size the learning-rate rules from the job's shape
  // (server/lr_rules.h); "none": a constant rate.
  std::string lr_schedule = "auto";
  double label_smoothing = 0;      // To workers; [0, 1).
  // Training-image augmentation of the workers: "none", "flip" (random
  // horizontal flips) or "crop_flip" (also random crops).
  std::string augment = "flip";
  DatasetKind dataset = DatasetKind::kFashionMnist;  // To every child.
  int64_t seed = 1;                // Passed to workers.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // Must exist.
  std::string save_params;         // Passed to the final eval when non-empty.
  std::string summary_json;        // Summary JSON also written here if set.
  std::string curve_csv;           // If set, "seconds,test_accuracy" rows of
                                   // Summary::curve are written here.
  // Accuracy-vs-time curve: every eval_every of training wall time an
  // evaluation on the first eval_examples test examples is started, unless
  // the previous one is still running (that tick is skipped). Zero = off.
  absl::Duration eval_every = absl::ZeroDuration();  // --eval_every_s.
  int64_t eval_examples = 5000;    // >= 1; --max_test_examples of those runs.
  int n_fetch = 1;                 // Passed to workers.
  int n_push = 1;                  // Passed to workers.
  int64_t max_train_examples = 0;  // 0 = all; passed to workers only if > 0.
  // Security (deploy/launch_security.h): the TLS and token
  // flags every child gets (--tls_cert, ..., from the launcher's own flags or
  // --secure), and the Prometheus ports: server k gets metrics_base_port + k,
  // worker i metrics_base_port + servers + i; -1 = off.
  std::vector<std::string> security_args;
  // --secure: the folder with one certificate per task (make_certs.sh
  // --ps --workers): server k presents ps-k, worker i worker-i, and the
  // servers take each worker's pushes only from its own certificate
  // (--require_task_certificates). Empty otherwise, or when workers run
  // independent replicas (one worker id per replica, one certificate per
  // process). The evaluation keeps the job-wide certificate.
  std::string task_cert_dir;
  int metrics_base_port = -1;
  // The shared flags given to the launcher that it does not place itself
  // (e.g. --momentum, --part_kb), passed on as given, before server_args /
  // worker_args.
  std::vector<std::string> forwarded_server_args;
  std::vector<std::string> forwarded_worker_args;
  std::vector<std::string> server_args;  // Appended to each ps_server argv.
  std::vector<std::string> worker_args;  // Appended to each ps_worker argv
                                         // (training and eval).
  std::string ps_server_bin;       // Path to ps_server; must be executable.
  std::string ps_worker_bin;       // Path to ps_worker; must be executable.
  std::string log_dir;             // Empty: a fresh directory under $TMPDIR
                                   // (or /tmp). Created if missing.
  absl::Duration startup_timeout = absl::Seconds(60);  // --startup_timeout_s.
  absl::Duration stop_grace = absl::Seconds(5);  // SIGTERM→SIGKILL delay.
  absl::Duration rate_report_interval = absl::Seconds(5);  // "cluster:" lines.
  // Restart a server or worker that died, up to this many times per child
  // (0: a death fails the job); a restarted server restores its snapshot
  // on its old port, a restarted worker its data position. Every server
  // snapshots to <log_dir>/ckpt/shard<k> every checkpoint_every and when
  // stopped; every worker keeps its position in <log_dir>/ckpt.
  int max_restarts = 0;                                 // --max_restarts.
  // One standby ps_server per shard (server/replication.h) beside its
  // primary: every task gets fixed loopback ports up front, the servers a
  // cluster spec naming the standbys, the workers and evaluations
  // --ps_standby_hosts. Not with --mode=sandblaster.
  bool standby = false;  // --standby.
  absl::Duration checkpoint_every = absl::Seconds(2);  // --checkpoint_every_s.
  // Continue the job whose snapshots are in log_dir (deploy/resume_check.h);
  // without it a log_dir holding snapshots is refused.
  bool resume = false;  // --resume.
  // The command line as typed (argv), for the line that says how to resume
  // an interrupted run; may be empty.
  std::vector<std::string> command_line;
};

// The value of --mode; InvalidArgument "unknown --mode=<v>; valid modes:
// async, sync, ssp, sandblaster" for anything else.
absl::StatusOr<TrainMode> ParseModeFlag(absl::string_view value);

// Checks the options before anything starts. InvalidArgument for a bad value
// (naming the flag).
absl::Status ValidateLaunchOptions(const LaunchOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCH_OPTIONS_H_
