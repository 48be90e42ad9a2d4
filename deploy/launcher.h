// File: deploy/launcher.h
//
// Runs a whole Downpour cluster on localhost: S ps_server processes, W
// ps_worker training processes, then one ps_worker evaluation process, and
// supervises them. deploy/launch_main.cc is a thin flag-parsing wrapper.
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
//                    "worker <i>" and "eval". Worker progress lines therefore
//                    pass through unchanged.
//   cluster: <R> examples/sec (<n> workers, step <s>)
//                    at most every rate_report_interval while training: R is
//                    the sum of the latest rate of each still-running worker
//                    that reported one, n how many such workers, s the
//                    largest latest step among them.
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
  std::string mode = "async";      // Only "async" is implemented.
  int epochs = 3;                  // Passed to workers, >= 1.
  int batch_size = 64;             // Passed to workers, >= 1.
  double lr = 0.05;                // Passed to servers.
  std::string optimizer = "adagrad";  // Passed to servers.
  int64_t seed = 1;                // Passed to workers.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // Must exist.
  std::string save_params;         // Passed to the eval run when non-empty.
  std::string summary_json;        // Summary JSON also written here if set.
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
  std::string log_dir;         // Where the per-child logs are.

  // {"mode":..,"servers":..,"workers":..,"epochs":..,"batch_size":..,
  //  "optimizer":..,"lr":..,"steps":..,"examples":..,"wall_seconds":..,
  //  "training_seconds":..,"examples_per_sec":..,"final_loss":..,
  //  "test_accuracy":..,"test_loss":..[,"staleness_mean":..]
  //  [,"staleness_max":..],"log_dir":..}
  std::string ToJson() const;
};

// Checks the options before anything starts. InvalidArgument for a bad value
// (naming the flag), Unimplemented for modes "sync" and "ssp".
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

// Runs the cluster as described in the file comment. Preconditions: options
// passed ValidateLaunchOptions. `stop_signal` (not owned, may be null) is
// polled: when it becomes non-zero all children are stopped and Cancelled is
// returned ("interrupted by signal N"). `out` is not owned.
absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCHER_H_
