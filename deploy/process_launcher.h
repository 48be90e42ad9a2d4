// File: deploy/process_launcher.h
//
// How the Supervisor (deploy/supervisor.h) starts and watches the processes
// of a ClusterPlan, behind an interface: a local fork/exec launcher now
// (deploy/subprocess.h), Slurm (srun) or remote-host launchers later, and
// fakes in tests. A Process is the supervisor's handle on one running task:
// its merged output line by line, its exit, and signals to it.
//
//   std::unique_ptr<ProcessLauncher> launcher = NewLocalProcessLauncher();
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Process> p, launcher->Start(spec));
//   launcher->WaitForOutput({p.get()}, absl::Milliseconds(100));
//   std::vector<std::string> lines;
//   p->ReadAvailable(&lines);
//
// Thread-safety: neither a launcher nor a Process is thread-safe; the
// supervisor uses them from one thread. A Process's destructor kills and
// reaps whatever is still running.
#ifndef DOWNPOUR_DEPLOY_PROCESS_LAUNCHER_H_
#define DOWNPOUR_DEPLOY_PROCESS_LAUNCHER_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/cluster_plan.h"
#include "deploy/subprocess.h"

namespace downpour {

class Process {
 public:
  virtual ~Process() = default;

  // Appends each complete output line available now, without blocking.
  virtual void ReadAvailable(std::vector<std::string>* lines) = 0;
  // True once the process has exited (never blocks; stays true).
  virtual bool CheckExited() = 0;
  // Precondition: CheckExited() returned true.
  virtual const ExitStatus& exit_status() const = 0;
  // Sends `sig` to the process (and what it started); a no-op once reaped.
  virtual absl::Status Signal(int sig) = 0;
  // SIGTERM, up to `grace` for it to exit (reading output into *lines, which
  // may be null), then SIGKILL. Always reaps.
  virtual ExitStatus Terminate(absl::Duration grace,
                               std::vector<std::string>* lines) = 0;
  // The most recent output lines, oldest first.
  virtual const std::deque<std::string>& tail() const = 0;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Starts `spec` (its argv on spec.host, output appended to spec.log_path).
  // Fails, leaving nothing running, when it cannot be started.
  virtual absl::StatusOr<std::unique_ptr<Process>> Start(
      const TaskSpec& spec) = 0;
  // Blocks until one of `procs` (all started by this launcher) has output or
  // `timeout` passes; may return early.
  virtual void WaitForOutput(const std::vector<Process*>& procs,
                             absl::Duration timeout) = 0;
};

// Runs each task as a child of this process (fork/exec, its own process
// group, SIGTERM when this thread dies: see deploy/subprocess.h). Refuses a
// spec whose host is not kDefaultHost.
std::unique_ptr<ProcessLauncher> NewLocalProcessLauncher();

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_PROCESS_LAUNCHER_H_
