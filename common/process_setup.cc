#include "common/process_setup.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/malloc_tuning.h"

namespace downpour {
namespace {

// What the handler touches: lock-free atomics only (async-signal-safe), in
// static storage so that a handler still running on another thread never
// reaches a destroyed object.
static_assert(std::atomic<bool>::is_always_lock_free);
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> g_requested{false};
std::atomic<int> g_signal{0};
// The pipe's write end while a StopSignal is installed, else -1.
std::atomic<int> g_write_fd{-1};
// The installing process: a child forked before it reset its handlers must
// not write into its parent's pipe.
std::atomic<int> g_pid{0};

constexpr int kStopSignals[] = {SIGINT, SIGTERM};
// Written by the destructor to end the watcher (no signal has number 0).
constexpr unsigned char kQuitByte = 0;

ABSL_CONST_INIT absl::Mutex g_install_mu(absl::kConstInit);
bool g_installed ABSL_GUARDED_BY(g_install_mu) = false;
// Created by the first Install, never closed (see the header).
int g_pipe[2] ABSL_GUARDED_BY(g_install_mu) = {-1, -1};

void HandleStopSignal(int sig) {
  const int saved_errno = errno;
  if (getpid() == g_pid.load(std::memory_order_relaxed)) {
    g_signal.store(sig);
    g_requested.store(true);
    const int fd = g_write_fd.load();
    const unsigned char byte = static_cast<unsigned char>(sig);
    // Nonblocking: a full pipe already holds a wake-up.
    if (fd >= 0) (void)!write(fd, &byte, 1);
  }
  errno = saved_errno;
}

// Reads whatever the pipe holds without blocking.
void DrainPipe(int fd) {
  unsigned char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

absl::Status ErrnoError(const char* what) {
  return absl::InternalError(
      absl::StrCat("stop signal: ", what, ": ", std::strerror(errno)));
}

}  // namespace

void SetUpProcess() {
  TuneMallocForLargeBuffers();
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

std::string SelfExePath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

StopSignal::StopSignal(Options options, int read_fd, int write_fd)
    : options_(std::move(options)), read_fd_(read_fd), write_fd_(write_fd) {}

absl::StatusOr<std::unique_ptr<StopSignal>> StopSignal::Install(
    Options options) {
  int fds[2];
  {
    absl::MutexLock l(&g_install_mu);
    if (g_installed) {
      return absl::FailedPreconditionError(
          "a StopSignal is installed already (one per process)");
    }
    if (g_pipe[0] < 0 && pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_pipe[0] = g_pipe[1] = -1;
      return ErrnoError("pipe2");
    }
    fds[0] = g_pipe[0];
    fds[1] = g_pipe[1];
    g_installed = true;
  }
  // Bytes a handler wrote while the previous StopSignal went away.
  DrainPipe(fds[0]);
  g_requested.store(false);
  g_signal.store(0);
  g_pid.store(static_cast<int>(getpid()));
  // From here on the destructor undoes what was done, on error too.
  std::unique_ptr<StopSignal> stop(
      new StopSignal(std::move(options), fds[0], fds[1]));
  // Blocked here and in the threads started from here on; the watcher
  // unblocks them for itself, so that it alone runs the handler.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  for (const int sig : kStopSignals) sigaddset(&stop_set, sig);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &stop_set, &before);
  stop->installer_ = pthread_self();
  sigemptyset(&stop->unblock_);
  for (const int sig : kStopSignals) {
    if (sigismember(&before, sig) == 0) sigaddset(&stop->unblock_, sig);
  }
  stop->watcher_ = std::thread([s = stop.get(), stop_set] {
    pthread_sigmask(SIG_UNBLOCK, &stop_set, nullptr);
    s->Watch();
  });
  g_write_fd.store(fds[1]);
  struct sigaction action = {};
  action.sa_handler = HandleStopSignal;
  sigemptyset(&action.sa_mask);
  // The watcher's poll returns on EINTR and reads the pipe; a thread that
  // still takes the signal (one started before Install) goes on with its
  // interrupted reads and writes.
  action.sa_flags = SA_RESTART;
  for (const int sig : kStopSignals) {
    if (sigaction(sig, &action, &stop->previous_[stop->replaced_]) != 0) {
      return ErrnoError("sigaction");
    }
    ++stop->replaced_;
  }
  return stop;
}

StopSignal::~StopSignal() {
  for (int i = 0; i < replaced_; ++i) {
    sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
  g_write_fd.store(-1);
  if (watcher_.joinable()) {
    // The pipe's reader is alive, so only a full pipe or a signal stops
    // the write; both pass.
    while (write(write_fd_, &kQuitByte, 1) != 1) {
      if (errno == EAGAIN) absl::SleepFor(absl::Milliseconds(1));
    }
    watcher_.join();
  }
  // A signal that came since the watcher left is handled now, by the
  // dispositions restored above.
  if (pthread_equal(pthread_self(), installer_) != 0) {
    pthread_sigmask(SIG_UNBLOCK, &unblock_, nullptr);
  }
  absl::MutexLock l(&g_install_mu);
  g_installed = false;
}

const std::atomic<bool>* StopSignal::requested() const { return &g_requested; }

const std::atomic<int>* StopSignal::signal_number() const { return &g_signal; }

void StopSignal::Watch() {
  bool first = true;
  unsigned char buf[64];
  for (;;) {
    struct pollfd p = {read_fd_, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
    const ssize_t n = read(read_fd_, buf, sizeof(buf));
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == kQuitByte) return;
      if (!first) continue;
      first = false;
      if (options_.on_stop) options_.on_stop(buf[i]);
      stopped_.Notify();
    }
  }
}

}  // namespace downpour
