// File: common/process_setup.h
//
// What every Downpour binary does before its own work: the process-wide
// settings (SetUpProcess), the path of its own executable (SelfExePath, to
// find sibling binaries), and the one graceful stop on SIGINT/SIGTERM
// (StopSignal). Only `main` functions call these; they hand what library
// code needs (a flag to poll, a notification to wait on) down by pointer.
//
//   int main(int argc, char** argv) {
//     absl::ParseCommandLine(argc, argv);
//     SetUpProcess();
//     absl::StatusOr<std::unique_ptr<StopSignal>> stop = StopSignal::Install();
//     if (!stop.ok()) ...
//     trainer.stop_requested = (*stop)->requested();        // polled
//     RunCluster(o, std::cout, (*stop)->signal_number());   // polled
//     return server->Run((*stop)->stopped());               // waited on
//   }
#ifndef DOWNPOUR_COMMON_PROCESS_SETUP_H_
#define DOWNPOUR_COMMON_PROCESS_SETUP_H_

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

namespace downpour {

// The settings every binary runs with: glibc's malloc tuned for large
// buffers (common/malloc_tuning.h), and abseil's mutex deadlock detection
// off (Debian's abseil is built with it on: a lock-order graph update on
// every Mutex acquisition, ~1% of the transport's CPU; tests keep it).
// Process-wide: call first in main, before any thread starts.
void SetUpProcess();

// The absolute path of the running executable (/proc/self/exe); empty when
// it cannot be read.
std::string SelfExePath();

// SIGINT and SIGTERM as a request to stop gracefully.
//
// The handler is async-signal-safe: it only stores to lock-free atomics (the
// signal's number and a flag) and writes one byte to a self-pipe. A thread of
// this object reads the pipe and, outside the handler, runs `on_stop` and
// notifies stopped(), so a waiter blocks without polling. A second signal
// updates signal_number() and nothing else; the process is not killed.
//
// The signals go to that thread: Install blocks SIGINT and SIGTERM in the
// calling thread, so that every thread it starts from then on (gRPC's, the
// trainer's) inherits the block, and the watcher unblocks them for itself
// alone. A thread blocked in a library's wait is then never the one picked
// to run the handler; under ThreadSanitizer, which runs a handler only when
// its thread next enters an intercepted call, a signal picked by a thread
// waiting inside uninstrumented gRPC was never handled at all. A signal sent
// to a blocking thread itself (raise, pthread_kill) waits until the thread
// unblocks it; kill(2) and the shell's kill reach the watcher. Children
// started through deploy/subprocess.cc clear their mask before exec.
//
// A signal's disposition belongs to the process, so at most one StopSignal
// is installed at a time (Install refuses a second), and only a main
// installs one. Destroying it restores the dispositions it replaced. The
// pipe (two descriptors, close-on-exec) stays open for the process's life:
// a handler running on another thread may still write to it while the
// object is destroyed.
//
// Thread-safety: the accessors may be called from any thread; Install and
// the destructor from main (the destructor unblocks the signals again when
// it runs on the thread that installed).
class StopSignal {
 public:
  struct Options {
    // Called once, on this object's thread, after the first signal, with
    // its number (before stopped() is notified). May be null.
    std::function<void(int signal)> on_stop;
  };

  // Installs the handler for SIGINT and SIGTERM. FailedPrecondition when a
  // StopSignal is installed already; Internal when the pipe, the thread or
  // sigaction fails.
  static absl::StatusOr<std::unique_ptr<StopSignal>> Install(
      Options options = {});

  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // True from the first signal on, for loops that poll (the worker's
  // trainer). Valid for the process's life.
  const std::atomic<bool>* requested() const;
  // The number of the latest signal, 0 before any, for loops that poll and
  // report it (the launcher). Valid for the process's life.
  const std::atomic<int>* signal_number() const;
  // Notified after the first signal, once `on_stop` has returned.
  const absl::Notification& stopped() const { return stopped_; }

 private:
  StopSignal(Options options, int read_fd, int write_fd);
  // The watcher thread: reads the pipe until the destructor's quit byte.
  void Watch();

  const Options options_;
  const int read_fd_;   // The process's pipe (never closed).
  const int write_fd_;
  absl::Notification stopped_;
  std::thread watcher_;
  // The dispositions of SIGINT and SIGTERM that Install replaced, the first
  // `replaced_` of them.
  struct sigaction previous_[2] = {};
  int replaced_ = 0;
  // The thread that installed, and the stop signals it had not blocked
  // before (the destructor unblocks those on it).
  pthread_t installer_ = {};
  sigset_t unblock_ = {};
};

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_PROCESS_SETUP_H_
