#include "deploy/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

extern char** environ;

namespace downpour {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;
// Bytes read per ReadAvailable call, so one chatty child cannot starve the
// others in a poll loop.
constexpr size_t kMaxReadPerCall = 1 << 20;
constexpr absl::Duration kPollSlice = absl::Milliseconds(50);

void CloseFd(int* fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // Logging is best-effort; the output is still delivered.
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

int PollTimeoutMs(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d) + 1, 1 << 30));
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecChild(pid_t parent, int out_w, int err_w,
                            char* const* argv, char* const* envp) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The parent may have died before prctl took effect.
  if (getppid() != parent) _exit(127);

  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) {
    dup2(devnull, STDIN_FILENO);
    if (devnull != STDIN_FILENO) close(devnull);
  }
  if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(out_w, STDERR_FILENO) < 0) {
    int e = errno;
    (void)!write(err_w, &e, sizeof(e));
    _exit(127);
  }
  execve(argv[0], argv, envp);
  int e = errno;
  (void)!write(err_w, &e, sizeof(e));
  _exit(127);
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (signal != 0) {
    const char* name = strsignal(signal);
    return absl::StrCat("signal ", signal, " (", name ? name : "?", ")");
  }
  return absl::StrCat("exit code ", exit_code);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const SubprocessOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("Subprocess::Start: empty argv");
  }
  const std::string& program = options.argv[0];

  // Everything the child needs is built before fork(): the child must not
  // allocate (the parent may be multi-threaded).
  std::vector<char*> argv;
  for (const std::string& a : options.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    absl::string_view name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const std::string& extra : options.extra_env) {
      if (absl::string_view(extra).substr(0, extra.find('=')) == name) {
        overridden = true;
        break;
      }
    }
    if (!overridden) env_storage.emplace_back(entry);
  }
  for (const std::string& extra : options.extra_env) {
    env_storage.push_back(extra);
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("cannot open log file ",
                                              options.log_path, ": ",
                                              strerror(errno)));
    }
  }
  int out_pipe[2];
  int err_pipe[2];  // Carries execve's errno; closed by a successful exec.
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    CloseFd(&log_fd);
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(e)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    CloseFd(&log_fd);
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(e)));
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      close(fd);
    }
    CloseFd(&log_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(e)));
  }
  if (pid == 0) {
    ExecChild(parent, out_pipe[1], err_pipe[1], argv.data(), envp.data());
  }

  // Also set the group here so that it exists before Start returns, whichever
  // of parent and child runs first. EACCES (child already exec'd) is fine.
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int ignored;
    while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    close(out_pipe[0]);
    CloseFd(&log_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot execute ", program, ": ", strerror(exec_errno)));
  }

  fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<Subprocess>(new Subprocess(
      pid, out_pipe[0], log_fd, program, options.tail_lines));
}

Subprocess::Subprocess(pid_t pid, int out_fd, int log_fd, std::string program,
                       size_t tail_lines)
    : pid_(pid),
      out_fd_(out_fd),
      log_fd_(log_fd),
      program_(std::move(program)),
      tail_lines_(tail_lines) {}

Subprocess::~Subprocess() {
  // The group id cannot be reused while any member of the group lives, so
  // this reaches only leftovers of our own child's group (or nobody).
  kill(-pid_, SIGKILL);
  if (!exited_) {
    int ws;
    while (waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
    }
  }
  CloseFd(&out_fd_);
  CloseFd(&log_fd_);
}

void Subprocess::AddLine(std::string line, std::vector<std::string>* lines) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (tail_lines_ > 0) {
    if (tail_.size() >= tail_lines_) tail_.pop_front();
    tail_.push_back(line);
  }
  if (lines != nullptr) lines->push_back(std::move(line));
}

void Subprocess::CloseOutput(std::vector<std::string>* lines) {
  if (!partial_.empty()) {
    AddLine(std::move(partial_), lines);
    partial_.clear();
  }
  CloseFd(&out_fd_);
}

void Subprocess::ReadAvailable(std::vector<std::string>* lines) {
  if (out_fd_ < 0) return;
  char buf[16384];
  size_t total = 0;
  while (total < kMaxReadPerCall) {
    ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      CloseOutput(lines);  // Unexpected read error: treat as end-of-file.
      return;
    }
    if (n == 0) {
      CloseOutput(lines);
      return;
    }
    total += static_cast<size_t>(n);
    if (log_fd_ >= 0) WriteAll(log_fd_, buf, static_cast<size_t>(n));
    absl::string_view chunk(buf, static_cast<size_t>(n));
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      if (nl == absl::string_view::npos) {
        partial_.append(chunk.data(), chunk.size());
        if (partial_.size() >= kMaxLineBytes) {
          AddLine(std::move(partial_), lines);
          partial_.clear();
        }
        break;
      }
      partial_.append(chunk.data(), nl);
      AddLine(std::move(partial_), lines);
      partial_.clear();
      chunk.remove_prefix(nl + 1);
    }
  }
}

void Subprocess::RecordWaitStatus(int ws) {
  exited_ = true;
  if (WIFSIGNALED(ws)) {
    status_.signal = WTERMSIG(ws);
    status_.exit_code = -1;
  } else {
    status_.signal = 0;
    status_.exit_code = WEXITSTATUS(ws);
  }
}

bool Subprocess::CheckExited() {
  if (exited_) return true;
  int ws = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &ws, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    RecordWaitStatus(ws);
  } else if (r < 0) {
    // ECHILD: someone else reaped our child (e.g. SIGCHLD set to SIG_IGN).
    exited_ = true;
    status_.exit_code = -1;
    status_.signal = 0;
  }
  return exited_;
}

absl::Status Subprocess::Signal(int sig) {
  if (exited_) return absl::OkStatus();
  if (kill(-pid_, sig) != 0 && errno != ESRCH) {
    return absl::InternalError(absl::StrCat("kill(-", pid_, ", ", sig,
                                            "): ", strerror(errno)));
  }
  return absl::OkStatus();
}

bool Subprocess::WaitFor(absl::Duration timeout,
                         std::vector<std::string>* lines) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    ReadAvailable(lines);
    if (CheckExited()) {
      // Output written before the exit is already in the pipe. Background
      // children may keep the pipe open, so do not wait for end-of-file.
      ReadAvailable(lines);
      return true;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    PollOutput({this}, std::min(left, kPollSlice));
  }
}

absl::StatusOr<std::string> Subprocess::WaitForLine(
    const std::function<bool(const std::string&)>& match,
    absl::Duration timeout, std::vector<std::string>* seen) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> batch;
  while (true) {
    batch.clear();
    ReadAvailable(&batch);
    bool done = CheckExited();
    if (done) ReadAvailable(&batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (match(batch[i])) {
        // Lines read after the match in the same batch are reported too, so
        // callers never lose output.
        if (seen != nullptr) {
          seen->insert(seen->end(), batch.begin(), batch.end());
        }
        return batch[i];
      }
    }
    if (seen != nullptr) seen->insert(seen->end(), batch.begin(), batch.end());
    if (done) {
      return absl::AbortedError(
          absl::StrCat(program_, " exited (", status_.ToString(),
                       ") before printing the expected line"));
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                       " waiting for a line from ", program_));
    }
    PollOutput({this}, std::min(left, kPollSlice));
  }
}

ExitStatus Subprocess::Terminate(absl::Duration grace,
                                 std::vector<std::string>* lines) {
  if (!CheckExited()) {
    Signal(SIGTERM).IgnoreError();
    if (!WaitFor(grace, lines)) {
      Signal(SIGKILL).IgnoreError();
      int ws = 0;
      pid_t r;
      do {
        r = waitpid(pid_, &ws, 0);
      } while (r < 0 && errno == EINTR);
      if (r == pid_) {
        RecordWaitStatus(ws);
      } else {
        exited_ = true;
      }
      ReadAvailable(lines);
    }
  } else {
    // Exited before we asked: what it wrote last may still be in the pipe
    // (a child that prints its error and exits at once).
    ReadAvailable(lines);
  }
  return status_;
}

void Subprocess::PollOutput(const std::vector<Subprocess*>& procs,
                            absl::Duration timeout) {
  std::vector<pollfd> fds;
  for (Subprocess* p : procs) {
    if (p != nullptr && p->out_fd_ >= 0) {
      fds.push_back(pollfd{p->out_fd_, POLLIN, 0});
    }
  }
  // poll() with no descriptors still sleeps for the timeout.
  poll(fds.data(), fds.size(), PollTimeoutMs(timeout));
}

}  // namespace downpour
