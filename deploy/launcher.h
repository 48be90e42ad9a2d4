// File: deploy/launcher.h
//
// Runs a whole Downpour cluster on localhost: S ps_server processes, W
// ps_worker training processes, then one ps_worker evaluation process, and
// supervises them. With eval_every > 0 it also evaluates the servers'
// parameters on part of the test set while the workers train, which gives an
// accuracy-vs-time curve. deploy/launch_main.cc is a thin flag-parsing wrapper.
//
// The pieces: LaunchOptions (deploy/launch_options.h), the ClusterPlan of
// every process (deploy/cluster_plan.h), a Supervisor over a ProcessLauncher
// (deploy/supervisor.h, deploy/process_launcher.h) and the Summary
// (deploy/run_summary.h); this file composes them into the run's phases.
//
//   LaunchOptions options;
//   options.ps_server_bin = ...; options.ps_worker_bin = ...;
//   options.data_dir = "/usr/share/datasets/fashion-mnist";
//   DP_RETURN_IF_ERROR(ValidateLaunchOptions(options));
//   absl::StatusOr<Summary> summary = RunCluster(options, std::cout, nullptr);
//
// Output contract (one line each, written to `out` and flushed per line):
//   launch: logs in <log_dir>[ (removed after a successful run; ...)]
//                    the second part for a temporary folder (no --log_dir),
//                    which is removed when the run succeeded and wrote
//                    nothing there in place of an output.
//   launch: server <k> listening on <host>:<port>  (host: kDefaultHost)
//   launch: standby <k> listening on <host>:<port>
//                    with options.standby, once shard k's standby joined
//                    its primary (the standbys start once every primary
//                    listens); every task's port is then fixed before any
//                    starts (free loopback ports), and a server
//                    restarted by max_restarts rejoins as its shard's
//                    standby.
//   <child output>   every line of every child, prefixed with "<name>: "
//                    unless it already starts with that; names are "ps <k>",
//                    "worker <i>", "curve eval" (the evaluations during
//                    training), "eval" and "save". Worker progress lines
//                    therefore pass through unchanged. The evaluation's
//                    SERVER_STATS lines stay in its log only (each server
//                    prints its statistics as it stops).
//   cluster: <R> examples/sec (<n> workers, step <s>)
//                    at most every rate_report_interval while training: R is
//                    the sum of the latest rate of each worker still
//                    training (no DONE line yet) that reported one, n how
//                    many such workers, s the largest latest step among them.
//   curve: t=<T> s test_accuracy=<A>
//                    one per point of the accuracy-vs-time curve, when its
//                    evaluation has finished (see Summary::curve).
//   launch: warning: curve eval failed (<why>)
//                    an evaluation during training failed; training goes on.
//   launch: training done in <T> s (<R> examples/sec over the whole training, ...)
//                    R as SUMMARY's examples_per_sec.
//   launch: evaluating
//   launch: cannot write --save_params=<path> (<why>); saving the parameters
//           to <log_dir>/<name> instead
//                    the final evaluation failed to save: a "save" child
//                    writes them into the log folder, and RunCluster ends
//                    with FailedPrecondition after the SUMMARY.
//   launch: stopping servers
//   SUMMARY {json}   last line, on success (see Summary::ToJson; with
//                    saved_params, and without log_dir for a removed
//                    temporary folder); also after outputs that could not
//                    be written where asked and were written into the log
//                    folder, before the FailedPrecondition naming them.
// Every server snapshots into <log_dir>/ckpt/shard<k> and every worker keeps
// its data position in <log_dir>/ckpt; when training ends RunCluster marks
// the folder TRAINED, and after a successful run it removes it
// (deploy/resume_check.h). Stopping stops the workers and evaluations
// first, then the servers (Supervisor::StopAll).
//
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
#include <ostream>

#include "absl/status/statusor.h"
#include "deploy/fs.h"
#include "deploy/launch_options.h"
#include "deploy/process_launcher.h"
#include "deploy/run_summary.h"

namespace downpour {

// Runs the cluster as described in the file comment, then writes
// options.summary_json and options.curve_csv (into the log folder, and
// FailedPrecondition, when they cannot be written where asked). Preconditions: options
// passed ValidateLaunchOptions. `stop_signal` (not owned, may be null) is
// polled: when it becomes non-zero all children are stopped and Cancelled is
// returned ("interrupted by signal N"; while the workers were training,
// followed by "; the servers wrote their snapshots ...; resume with:\n  " and
// ResumeCommand of options.command_line). `out` is not owned. Children are
// started by a local ProcessLauncher.
absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal);

// The same with the processes started by `launcher` (not owned).
absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   ProcessLauncher* launcher,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCHER_H_
