// File: deploy/subprocess.h
//
// Starts a child process with its stdout and stderr merged into one pipe and
// lets the caller read that output line by line without blocking. Used by the
// cluster launcher (deploy/launcher.h) and by the multi-process tests in
// tests/.
//
//   SubprocessOptions opts;
//   opts.argv = {"/bin/sh", "-c", "echo hello; exit 3"};
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(opts));
//   std::vector<std::string> lines;
//   p->WaitFor(absl::Seconds(10), &lines);   // lines == {"hello"}
//   p->exit_status().exit_code;               // 3
//
// Process model:
//   * The child runs in its own process group (setpgid), and every signal the
//     parent sends (Signal, Terminate, the destructor) goes to the whole group,
//     so shell scripts and their children are stopped together.
//   * The child asks the kernel for SIGTERM when its parent dies
//     (prctl(PR_SET_PDEATHSIG)). Linux delivers it when the *thread* that
//     forked the child exits, so start subprocesses from a thread that lives
//     as long as they should.
//   * The child starts with all signals at their default disposition and an
//     empty signal mask, whatever the parent ignored or blocked; stdin is
//     /dev/null.
//   * The destructor kills (SIGKILL) and reaps a child that is still running:
//     a Subprocess never leaves a zombie or an orphan behind.
//
// Thread-safety: a Subprocess is not thread-safe; use it from one thread.
#ifndef DOWNPOUR_DEPLOY_SUBPROCESS_H_
#define DOWNPOUR_DEPLOY_SUBPROCESS_H_

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace downpour {

// How a child process ended.
struct ExitStatus {
  int exit_code = -1;  // The exit code when signal == 0.
  int signal = 0;      // The terminating signal, 0 when the child exited.

  bool success() const { return signal == 0 && exit_code == 0; }
  // "exit code 3" or "signal 9 (Killed)".
  std::string ToString() const;
};

struct SubprocessOptions {
  // argv[0] is the program path; it is executed as given (no PATH search).
  std::vector<std::string> argv;
  // Extra "NAME=value" entries added to (or overriding) the parent's
  // environment.
  std::vector<std::string> extra_env;
  // When non-empty, every byte the child writes is appended to this file
  // (created if missing) as it is read.
  std::string log_path;
  // How many of the most recent output lines tail() keeps.
  size_t tail_lines = 50;
};

class Subprocess {
 public:
  // Forks and executes options.argv. Fails (and leaves nothing running) when
  // argv is empty, the log file cannot be opened or the program cannot be
  // executed (the errno from execve is reported).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const SubprocessOptions& options);

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // SIGKILLs the child's process group and reaps the child if it has not been
  // reaped yet; otherwise sends a best-effort SIGKILL to whatever is left of
  // its process group (e.g. background jobs of a shell script).
  ~Subprocess();

  pid_t pid() const { return pid_; }
  const std::string& program() const { return program_; }

  // The read end of the output pipe, for poll(); -1 once the output reached
  // end-of-file.
  int output_fd() const { return out_fd_; }
  bool output_closed() const { return out_fd_ < 0; }

  // Reads whatever output is available without blocking and appends each
  // complete line (without its "\n" or trailing "\r") to *lines. At
  // end-of-file an unterminated last line is appended too. A line longer than
  // 64 KiB is split. `lines` may be null (output is then only logged and kept
  // in tail()).
  void ReadAvailable(std::vector<std::string>* lines);

  // Reaps the child if it has exited; never blocks. Returns true once the
  // child has exited (and stays true).
  bool CheckExited();
  bool exited() const { return exited_; }
  // Precondition: exited().
  const ExitStatus& exit_status() const { return status_; }

  // Sends `sig` to the child's process group. A no-op once the child has been
  // reaped (its pid may be reused).
  absl::Status Signal(int sig);

  // Reads output (appending to *lines, which may be null) until the child
  // exits or `timeout` passes. After the exit, output still buffered in the
  // pipe is read too. Returns exited().
  bool WaitFor(absl::Duration timeout, std::vector<std::string>* lines);

  // Like WaitFor, but returns the first line for which `match` is true (all
  // lines read, matching or not, are still appended to *seen when non-null).
  // Fails with DeadlineExceeded after `timeout`, or with Aborted (naming the
  // exit status) when the child exits without printing such a line.
  absl::StatusOr<std::string> WaitForLine(
      const std::function<bool(const std::string&)>& match,
      absl::Duration timeout, std::vector<std::string>* seen);

  // SIGTERM to the group, up to `grace` for the child to exit (reading its
  // output meanwhile), then SIGKILL. Always reaps the child.
  ExitStatus Terminate(absl::Duration grace,
                       std::vector<std::string>* lines = nullptr);

  // The last SubprocessOptions::tail_lines lines of output, oldest first.
  const std::deque<std::string>& tail() const { return tail_; }

  // Blocks until one of `procs` has output to read (or end-of-file) or
  // `timeout` passes; returns early on a signal (EINTR). Processes whose
  // output is closed are ignored; with none left it just sleeps `timeout`.
  static void PollOutput(const std::vector<Subprocess*>& procs,
                         absl::Duration timeout);

 private:
  Subprocess(pid_t pid, int out_fd, int log_fd, std::string program,
             size_t tail_lines);

  void AddLine(std::string line, std::vector<std::string>* lines);
  void CloseOutput(std::vector<std::string>* lines);
  void RecordWaitStatus(int wait_status);

  const pid_t pid_;
  int out_fd_;        // Owned; -1 once closed.
  int log_fd_;        // Owned; -1 when not logging.
  const std::string program_;
  const size_t tail_lines_;
  std::string partial_;  // Output after the last "\n".
  std::deque<std::string> tail_;
  bool exited_ = false;
  ExitStatus status_;
};

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_SUBPROCESS_H_
