// File: deploy/launcher.h
//
// Runs a whole Downpour cluster on localhost: S ps_server processes, W
// ps_worker training processes, then one ps_worker evaluation process, and
// supervises them. With eval_every > 0 it also evaluates the servers'
// parameters on part of the test set while the workers train, which gives an
// accuracy-vs-time curve. deploy/launch_main.cc is a thin flag-parsing wrapper.
//
//   LaunchOptions options;
//   options.ps_server_bin = ...; options.ps_worker_bin = ...;
//   options.data_dir = "/usr/share/datasets/fashion-mnist";
//   DP_RETURN_IF_ERROR(ValidateLaunchOptions(options));
//   absl::StatusOr<Summary> summary = RunCluster(options, std::cout, nullptr);
//
// Output contract (one line each, written to `out` and flushed per line):
//   launch: logs in <log_dir>
//   launch: server <k> listening on 127.0.0.1:<port>
//   <child output>   every line of every child, prefixed with "<name>: "
//                    unless it already starts with that; names are "ps <k>",
//                    "worker <i>", "curve eval" (the evaluations during
//                    training) and "eval". Worker progress lines therefore
//                    pass through unchanged.
//   cluster: <R> examples/sec (<n> workers, step <s>)
//                    at most every rate_report_interval while training: R is
//                    the sum of the latest rate of each still-running worker
//                    that reported one, n how many such workers, s the
//                    largest latest step among them.
//   curve: t=<T> s test_accuracy=<A>
//                    one per point of the accuracy-vs-time curve, when its
//                    evaluation has finished (see Summary::curve).
//   launch: warning: curve eval failed (<why>)
//                    an evaluation during training failed; training goes on.
//   launch: training done in <T> s
//   launch: evaluating
//   launch: stopping servers
//   SUMMARY {json}   last line, on success only (see Summary::ToJson).
// A failure is returned as a Status (nothing else is printed for it); for a
// child failure the message is
//   "<name> failed (exit code N | signal S (Name)); last lines:\n    <line>..."
// and launch_main prints it as "launch: <message>".
//
// Every child runs in its own process group with PR_SET_PDEATHSIG=SIGTERM;
// RunCluster returns only after every child it started has been reaped.
#ifndef DOWNPOUR_DEPLOY_LAUNCHER_H_
#define DOWNPOUR_DEPLOY_LAUNCHER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace downpour {

// Every tunable of the launcher. launch_main.cc maps one flag to each field
// (flag name = field name unless noted).
struct LaunchOptions {
  int servers = 2;                 // Parameter-server shards, >= 1.
  int workers = 2;                 // Training worker processes, >= 1.
  // Compute devices of each worker process: "auto", "cpu" or "cuda", and the
  // GPUs it runs one replica on each (e.g. "0,1,2,3"; "0,0" runs two replicas
  // on GPU 0). Empty gpus: one replica (or `replicas` CPU replicas).
  std::string device = "auto";
  std::string gpus;
  int replicas = 1;
  // Replicas of one process: "sum" (one push of their mean gradient) or
  // "none" (each replica is a worker of its own, as far as servers know).
  std::string local_aggregation = "sum";
  // Replicas per worker process (from gpus or replicas).
  int ReplicasPerWorker() const;
  // Workers the servers see: workers, times the replicas when each replica
  // pushes on its own.
  int ServerWorkers() const {
    return local_aggregation == "none" ? workers * ReplicasPerWorker() : workers;
  }
  // "async" (Downpour), "sync" (the servers aggregate a step's gradients
  // from replicas_to_aggregate workers before applying them) or "ssp"
  // (stale-synchronous: no worker runs more than `staleness` steps ahead of
  // the slowest). Passed to servers, workers and the evaluations.
  std::string mode = "async";
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
  double lr = 0.05;                // Passed to servers.
  std::string optimizer = "adagrad";  // Passed to servers.
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
};

// One point of the accuracy-vs-time curve.
struct CurvePoint {
  double seconds = 0;        // Since the workers were started, taken when
                             // the evaluation was started.
  double test_accuracy = 0;
};

// The `seconds` of the first point (in order) whose accuracy is >=
// `threshold`, or -1 if there is none.
double TimeToAccuracy(const std::vector<CurvePoint>& curve, double threshold);

// The result of a successful run; printed as `SUMMARY {json}`.
struct Summary {
  std::string mode;
  int servers = 0;
  int workers = 0;
  int epochs = 0;
  int batch_size = 0;
  std::string optimizer;
  double lr = 0;
  int64_t steps = 0;           // Sum of the workers' DONE "steps".
  int64_t examples = 0;        // Sum of the workers' DONE "examples".
  double wall_seconds = 0;     // First server start to end of evaluation.
  double training_seconds = 0; // Workers started to last worker done.
  double examples_per_sec = 0; // examples / training_seconds.
  double final_loss = 0;       // Mean of the workers' DONE "final_loss".
  double test_accuracy = 0;    // From the EVAL line.
  double test_loss = 0;        // From the EVAL line.
  // From SERVER_STATS lines, when any gave them: mean weighted by each
  // shard's "pushes_applied" (plain mean if a shard lacks it), and max.
  std::optional<double> staleness_mean;
  std::optional<double> staleness_max;
  // Also from SERVER_STATS: p50 combined like the mean (shards see nearly
  // the same pushes, so their medians barely differ), p99 the largest
  // shard's, dropped_stale the sum over shards.
  std::optional<double> staleness_p50;
  std::optional<double> staleness_p99;
  std::optional<int64_t> dropped_stale;
  // Evaluations during training (LaunchOptions::eval_every) in time order,
  // then the final one at training_seconds.
  std::vector<CurvePoint> curve;
  double time_to_85 = -1;      // TimeToAccuracy(curve, 0.85).
  double time_to_88 = -1;      // TimeToAccuracy(curve, 0.88).
  std::string log_dir;         // Where the per-child logs are.

  // {"mode":..,"servers":..,"workers":..,"epochs":..,"batch_size":..,
  //  "optimizer":..,"lr":..,"steps":..,"examples":..,"wall_seconds":..,
  //  "training_seconds":..,"examples_per_sec":..,"final_loss":..,
  //  "test_accuracy":..,"test_loss":..,"time_to_85":..,"time_to_88":..
  //  [,"staleness_mean":..][,"staleness_max":..][,"staleness_p50":..]
  //  [,"staleness_p99":..][,"dropped_stale":..],"log_dir":..}
  // The curve itself is not in the JSON (see LaunchOptions::curve_csv).
  std::string ToJson() const;
};

// Checks the options before anything starts. InvalidArgument for a bad value
// (naming the flag).
absl::Status ValidateLaunchOptions(const LaunchOptions& options);

// Finds a sibling binary of the running executable. `relpath` is the
// workspace-relative path, e.g. "server/ps_server". For each exe in
// `exe_paths` (typically /proc/self/exe resolved, then argv[0]) it tries
//   $RUNFILES_DIR/downpour/<relpath>   (when RUNFILES_DIR is set; once)
//   <exe>.runfiles/downpour/<relpath>  (bazel run)
//   <dir of exe>/../<relpath>          (bazel-bin layout, bundle folder)
// and returns the first executable file. NotFound lists all tried paths.
absl::StatusOr<std::string> FindSiblingBinary(
    const std::vector<std::string>& exe_paths, absl::string_view relpath);

// Runs the cluster as described in the file comment, then writes
// options.summary_json and options.curve_csv. Preconditions: options
// passed ValidateLaunchOptions. `stop_signal` (not owned, may be null) is
// polled: when it becomes non-zero all children are stopped and Cancelled is
// returned ("interrupted by signal N"). `out` is not owned.
absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCHER_H_
