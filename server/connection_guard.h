// File: server/connection_guard.h
//
// Keeps a server's listening ports usable against clients that only open
// connections. gRPC 1.51 has no connection limit, and when accept4 fails
// for want of file descriptors it stops polling the listener for good
// (grpc/grpc#20418): connections opened before keep working, every new one
// waits in the kernel's backlog. So a shard's process:
//  * raises its soft file limit to the hard one (RaiseFileLimit, at start);
//  * caps the connections to its ports: a thread counts them every
//    `interval` (its own TCP sockets bound to those ports, listed from
//    /proc/self/fd) and, above `max_connections`,
//    shuts down the ones silent longest (TCP_INFO's last receipt), so a
//    stranger holding idle connections loses them and the workers, which
//    talk, keep theirs; gRPC then closes the sockets itself;
//  * notices a listener that stopped accepting: one whose accept queue has
//    not been empty for `stall_after`. It calls `on_stall` with a message
//    saying so (ps_server logs it and exits 3, so the supervisor restarts
//    it on the same port), after closing the few descriptors it has held
//    in reserve since Start, so that the shutdown has some to work with.
// /proc/self/fd is opened once at Start, so the guard keeps working when
// the process is out of descriptors.
//
//   ConnectionGuardOptions o;
//   o.ports = {host->port()};
//   o.max_connections = 96;
//   o.on_stall = [](const std::string& why) { ... };
//   DP_ASSIGN_OR_RETURN(auto guard, ConnectionGuard::Start(o));
//
// Linux only. Thread-safety: Start, then the destructor (which stops the
// thread); the callbacks run on the guard's thread.
#ifndef DOWNPOUR_SERVER_CONNECTION_GUARD_H_
#define DOWNPOUR_SERVER_CONNECTION_GUARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit
// in force afterwards.
int64_t RaiseFileLimit();

// The connection cap a shard takes when none is given: room for every
// worker's channels, an evaluation, probes and the chief, and at most half
// the file limit, so that the cap is reached long before the descriptors
// run out.
int DefaultMaxConnections(int num_workers, int64_t file_limit);

struct ConnectionGuardOptions {
  std::vector<int> ports;  // The server's bound listening ports.
  int max_connections = 1024;
  // Each count costs a few system calls per open descriptor of the
  // process (tens of microseconds for a shard's few dozen).
  absl::Duration interval = absl::Seconds(1);
  absl::Duration stall_after = absl::Seconds(5);
  std::function<void(const std::string&)> on_stall;
  std::function<void(const std::string&)> log;
};

class ConnectionGuard {
 public:
  // InvalidArgument for no port or a cap below 1; Unavailable when /proc
  // cannot be read.
  static absl::StatusOr<std::unique_ptr<ConnectionGuard>> Start(
      ConnectionGuardOptions options);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Connections shut down for the cap so far.
  int64_t shut_down() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit ConnectionGuard(ConnectionGuardOptions options);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // One look: the cap, then the accept queues.
  void Check();
  void ReleaseReserve();

  // Held from Start until a stall is reported: enough for a final snapshot
  // (a file and its folder) and the pipes a sanitizer's report opens.
  static constexpr int kReservedDescriptors = 8;

  const ConnectionGuardOptions options_;
  int fd_dir_ = -1;   // /proc/self/fd, owned.
  std::vector<int> reserve_;  // Open /dev/null descriptors, owned.
  // The guard thread's own state.
  absl::flat_hash_set<uint64_t> last_accepted_;  // Inodes seen last time.
  absl::Time queued_since_ = absl::InfiniteFuture();
  bool stalled_ = false;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t shut_down_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_CONNECTION_GUARD_H_
