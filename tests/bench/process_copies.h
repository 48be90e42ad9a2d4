// File: tests/bench/process_copies.h
//
// W copies of one measurement, each in a process of its own, as W workers
// on one machine run: forked before anything else is opened (a device, a
// thread pool), each writing its result into memory the parent reads once
// all have exited. Between the copies, a barrier (`Gate`): a benchmark that
// calls it before each step makes every copy begin each step together, as
// the workers of a sync job do (each step waits for the slowest and all
// computes run at the same moments).
//
//   absl::StatusOr<std::unique_ptr<ProcessCopies>> c =
//       ProcessCopies::Fork(/*copies=*/2, sizeof(Result));
//   if ((*c)->index() >= 0) {             // A copy.
//     for (...) { (*c)->Gate(); Step(); }
//     new ((*c)->slot((*c)->index())) Result{...};
//     (*c)->ExitCopy(0);                  // Never returns.
//   }
//   absl::Status s = (*c)->WaitAll();     // The parent: every copy ended?
//   Use((*c)->slot(0), (*c)->slot(1));
//
// A copy that exits with a non-zero status or dies makes WaitAll kill the
// others (which may wait in Gate for it) and report it. Thread-safety: each
// process uses its own object from one thread. A slot holds plain bytes
// (trivially copyable types only).
#ifndef DOWNPOUR_TESTS_BENCH_PROCESS_COPIES_H_
#define DOWNPOUR_TESTS_BENCH_PROCESS_COPIES_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

class ProcessCopies {
 public:
  // Forks `copies` (>= 1) processes, each with a zeroed slot of
  // `slot_bytes`. Returns in each copy (index() = 0 .. copies - 1) and in
  // the parent (index() = -1).
  static absl::StatusOr<std::unique_ptr<ProcessCopies>> Fork(
      int copies, size_t slot_bytes);

  ~ProcessCopies();
  ProcessCopies(const ProcessCopies&) = delete;
  ProcessCopies& operator=(const ProcessCopies&) = delete;

  int copies() const { return copies_; }
  // This copy's index; -1 in the parent.
  int index() const { return index_; }

  // A copy's slot (shared by all processes).
  void* slot(int copy) const;

  // In a copy: returns once every copy has called Gate as many times.
  void Gate();

  // In a copy: ends this process with `status` at once (no destructors,
  // no atexit handlers: those belong to the parent).
  [[noreturn]] void ExitCopy(int status);

  // In the parent: waits for every copy. If one exits with a non-zero
  // status or dies from a signal, kills the rest and returns an error
  // naming it; *exit_status (when given) gets its exit status (or 1).
  absl::Status WaitAll(int* exit_status = nullptr);

 private:
  ProcessCopies(int copies, size_t slot_bytes, void* shared, size_t bytes);

  const int copies_;
  const size_t slot_bytes_;
  void* const shared_;  // The barrier, then the slots. Owned (mmap).
  const size_t shared_bytes_;
  int index_ = -1;
  std::vector<pid_t> pids_;  // In the parent.
};

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_PROCESS_COPIES_H_
