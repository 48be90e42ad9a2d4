// File: deploy/supervisor.h
//
// Starts tasks through a ProcessLauncher and supervises them: prints every
// output line with the task's name, hands each line to an observer, reports
// exits, stops everything (SIGTERM, grace, SIGKILL) and builds the failure
// message for a task. What the tasks are and what their lines mean is the
// caller's business (deploy/launcher.cc).
//
//   Supervisor sup(launcher.get(), out, {.log_dir = dir}, on_line);
//   DP_ASSIGN_OR_RETURN(Supervisor::Child * c, sup.Start(spec));
//   while (...) {
//     sup.Pump(absl::Milliseconds(100));
//     for (Supervisor::Child* exited : sup.ReapExited()) ...
//     DP_RETURN_IF_ERROR(sup.CheckStopSignal());
//   }
//
// Output: each child line is written to `out` as "<name>: <line>", or as is
// when it already starts with "<name>:" (worker progress lines). A child that
// outlives stop_grace after SIGTERM gets
//   "launch: <name> did not stop within <grace> of SIGTERM; sending SIGKILL".
//
// Ownership and threads: owns its children; the destructor stops them all.
// Use from one thread (the one whose exit should take the children along).
#ifndef DOWNPOUR_DEPLOY_SUPERVISOR_H_
#define DOWNPOUR_DEPLOY_SUPERVISOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "deploy/cluster_plan.h"
#include "deploy/process_launcher.h"

namespace downpour {

struct SupervisorOptions {
  std::string log_dir;  // Named in failure messages.
  absl::Duration stop_grace = absl::Seconds(5);  // SIGTERM→SIGKILL delay.
  // Polled by CheckStopSignal; not owned, may be null.
  const std::atomic<int>* stop_signal = nullptr;
  // How many output lines of a failed child Fail shows.
  size_t failure_tail_lines = 20;
  // Lines of a child with this role for which it returns true go to the
  // observer (and the child's log) but not to `out`. May be null.
  std::function<bool(TaskRole, const std::string&)> quiet;
};

// The status code whose exit code (common/exit_codes.h) is a child's: exit
// code 2 FailedPrecondition (2), 3 Unavailable (3), any other Unknown (1);
// killed by a signal (a crash, the OOM killer, a stop at a timeout) Aborted
// (3).
absl::StatusCode StatusCodeForExit(const ExitStatus& status);

class Supervisor {
 public:
  struct Child {
    TaskSpec spec;
    std::unique_ptr<Process> proc;
    absl::Time started;
    bool exit_handled = false;  // ReapExited has returned it.
    int restarts = 0;           // How often Restart ran it again.
    const std::string& name() const { return spec.name; }
    TaskRole role() const { return spec.role; }
  };
  // Called for every output line of every child, after it is printed.
  using LineObserver = std::function<void(const Child&, const std::string&)>;

  // `launcher` and `out` are not owned and must outlive the supervisor.
  Supervisor(ProcessLauncher* launcher, std::ostream& out,
             SupervisorOptions options, LineObserver on_line);
  ~Supervisor();

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts `spec`; "cannot start <name>: <why>" on failure (nothing else is
  // stopped). The pointer stays valid for the supervisor's lifetime.
  absl::StatusOr<Child*> Start(const TaskSpec& spec);
  // Starts c->spec again (the caller may have changed
  // it, e.g. a server's port) in place of the exited process; `c` stays valid
  // and keeps its name, c->restarts counts the restarts. Precondition:
  // ReapExited returned `c`. "cannot restart <name>: <why>" on failure.
  absl::Status Restart(Child* c);
  // Waits up to `timeout` for output, then handles every available line.
  void Pump(absl::Duration timeout);
  // Children that exited since the last call, their output drained.
  std::vector<Child*> ReapExited();
  // Cancelled ("interrupted by signal N") once the stop signal is set, after
  // printing "launch: got signal N; stopping the workers, then the servers"
  // and stopping all (StopAll's order).
  absl::Status CheckStopSignal();
  // SIGTERM to every running child, up to stop_grace, then SIGKILL: first
  // to every child but the servers, then to the servers (so that workers
  // stop while their servers still answer, and servers snapshot last).
  void StopAll();
  // Stops every child and returns
  //   "<name> failed (<why>); last lines:\n    <line>...\n(full logs in <dir>)"
  // with the code StatusCodeForExit gives c's exit status, so that launch
  // exits with its child's code.
  absl::Status Fail(const Child& c, absl::string_view why);
  // Writes one line to `out` and flushes.
  void Print(absl::string_view line);

 private:
  // StopAll's SIGTERM, grace and SIGKILL for the children `which` selects.
  void StopWave(const std::function<bool(const Child&)>& which);
  void Drain(Child& c);
  void HandleLine(const Child& c, const std::string& line);

  ProcessLauncher* const launcher_;  // Not owned.
  std::ostream& out_;                // Not owned.
  const SupervisorOptions options_;
  const LineObserver on_line_;
  std::vector<std::unique_ptr<Child>> children_;
};

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_SUPERVISOR_H_
