#include "tests/bench/process_copies.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace downpour {
namespace {

// The barrier's room at the start of the shared memory, rounded up so that
// the slots start 64-byte aligned.
constexpr size_t kHeaderBytes = (sizeof(pthread_barrier_t) + 63) / 64 * 64;

size_t RoundedSlot(size_t slot_bytes) { return (slot_bytes + 63) / 64 * 64; }

}  // namespace

ProcessCopies::ProcessCopies(int copies, size_t slot_bytes, void* shared,
                             size_t bytes)
    : copies_(copies),
      slot_bytes_(RoundedSlot(slot_bytes)),
      shared_(shared),
      shared_bytes_(bytes) {}

absl::StatusOr<std::unique_ptr<ProcessCopies>> ProcessCopies::Fork(
    int copies, size_t slot_bytes) {
  if (copies < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("copies must be >= 1, got ", copies));
  }
  const size_t bytes = kHeaderBytes + RoundedSlot(slot_bytes) * copies;
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap of ", bytes, " shared bytes: ", strerror(errno)));
  }
  std::unique_ptr<ProcessCopies> c(
      new ProcessCopies(copies, slot_bytes, shared, bytes));
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  const int rc = pthread_barrier_init(static_cast<pthread_barrier_t*>(shared),
                                      &attr, copies);
  pthread_barrierattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("pthread_barrier_init: ", strerror(rc)));
  }
  for (int i = 0; i < copies; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      // The forked ones would wait in Gate for the missing copy.
      for (pid_t p : c->pids_) kill(p, SIGKILL);
      for (pid_t p : c->pids_) waitpid(p, nullptr, 0);
      c->pids_.clear();
      return absl::ResourceExhaustedError(
          absl::StrCat("fork of copy ", i, ": ", strerror(err)));
    }
    if (pid == 0) {
      c->index_ = i;
      c->pids_.clear();
      return c;
    }
    c->pids_.push_back(pid);
  }
  return c;
}

ProcessCopies::~ProcessCopies() {
  // A parent that did not wait: no copy outlives it.
  for (pid_t p : pids_) kill(p, SIGKILL);
  for (pid_t p : pids_) waitpid(p, nullptr, 0);
  munmap(shared_, shared_bytes_);
}

void* ProcessCopies::slot(int copy) const {
  return static_cast<char*>(shared_) + kHeaderBytes + slot_bytes_ * copy;
}

void ProcessCopies::Gate() {
  pthread_barrier_wait(static_cast<pthread_barrier_t*>(shared_));
}

void ProcessCopies::ExitCopy(int status) {
  std::fflush(nullptr);
  _exit(status);
}

absl::Status ProcessCopies::WaitAll(int* exit_status) {
  absl::Status failed;
  std::vector<bool> done(pids_.size(), false);
  size_t left = pids_.size();
  // Polled, so that only these processes are reaped and a failed copy is
  // noticed while the others still run.
  while (left > 0) {
    bool reaped = false;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = waitpid(pids_[i], &status, WNOHANG);
      if (r == 0) continue;
      reaped = true;
      done[i] = true;
      --left;
      const bool ok =
          r == pids_[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok || !failed.ok()) continue;
      const std::string how =
          r != pids_[i]
              ? absl::StrCat("could not be waited for: ", strerror(errno))
          : WIFEXITED(status)
              ? absl::StrCat("exited with status ", WEXITSTATUS(status))
              : absl::StrCat("died from signal ", WTERMSIG(status));
      failed = absl::InternalError(
          absl::StrCat("copy ", i, " (pid ", pids_[i], ") ", how));
      if (exit_status != nullptr) {
        *exit_status =
            r == pids_[i] && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      }
      // The others may wait in Gate for it.
      for (size_t j = 0; j < pids_.size(); ++j) {
        if (!done[j]) kill(pids_[j], SIGKILL);
      }
    }
    if (!reaped) absl::SleepFor(absl::Milliseconds(5));
  }
  pids_.clear();
  return failed;
}

}  // namespace downpour
