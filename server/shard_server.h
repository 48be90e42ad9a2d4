// File: server/shard_server.h
//
// One parameter-server shard process's whole life, from an options struct
// (no flags are read here): restore from the newest snapshot before
// serving, serve (server/ps_host.h), announce where (a log line and the
// port file), write snapshots while serving (server/snapshotter.h), give an
// idle shard's free heap back (common/heap_trimmer.h), and for a job from a
// cluster spec serve job control (server/job_control.h). Run blocks until
// it is told to stop or the job is over, then stops serving, writes the
// final snapshot, logs the shard's counters and returns the exit code.
// ps_server's main is this plus flags and the stop signal; tests run it in
// process.
//
//   ShardServerOptions o;
//   o.host.listen_addresses = {"127.0.0.1:0"};
//   o.snapshots.dir = "/ckpt/ps0";
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> server,
//                       ShardServer::Create(std::move(o)));
//   absl::Notification stop;      // e.g. StopSignal::stopped()
//   int exit_code = server->Run(stop);
//
// Log lines (stdout; scripts and tests read them):
//   ps_server: <cluster spec>                        (a spec job only)
//   ps_server: shard k: <restore / snapshot / job end message>
//   ps_server: metrics on http://<bind>:<port>/metrics
//   ps_server: shard k of S (<mode> mode, <optimizer>, lr <lr>[, schedule])
//       listening on <address>                     (one line)
//   ps_server: shard k stopped: <ShardStatsToJson>
// and on stderr "ps_server: shard k: exiting with status N: <reason>" when
// the job failed.
//
// A shard with max_connections set caps its connections and watches its
// listener (server/connection_guard.h); when the listener stops accepting it
// logs why and sends its own process SIGTERM, so a ps_server drains, writes
// its final snapshot and exits 3 for its supervisor to restart it.
//
// Thread-safety: Run from one thread; the accessors from any. The trimmer
// acts on the whole process (malloc_trim): set heap_trim_min_mb to 0 for
// every shard but one of a process.
#ifndef DOWNPOUR_SERVER_SHARD_SERVER_H_
#define DOWNPOUR_SERVER_SHARD_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/heap_trimmer.h"
#include "server/connection_guard.h"
#include "server/job_control.h"
#include "server/parameter_store.h"
#include "server/ps_host.h"
#include "server/replication.h"
#include "server/snapshotter.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace downpour {

struct ShardServerOptions {
  // The shard's store, service, addresses and security. A spec job's
  // values must already be applied (ApplyClusterSpec). The server adds its
  // job-control service to extra_services and sets prepare_store (when
  // snapshots.dir is set).
  ParameterServerHostOptions host;
  // Set when the job comes from a cluster spec: the server logs it, serves
  // job control, and Run returns once the job is over.
  std::optional<ClusterSpec> spec;
  // The learning rate for one worker, as given (host.store holds it scaled
  // for the workers); what job control reports to the chief.
  double lr = 0;
  // If not empty, the bound port is written here (atomically, "<port>\n")
  // once the shard serves.
  std::string port_file;
  // Snapshots and restore; an empty dir turns both off. The log is the
  // server's ("ps_server: shard k: ...").
  SnapshotterOptions snapshots;
  // The job's identity (common/job_identity.h), claimed in snapshots.dir
  // before the restore: a folder of another job is refused and one that
  // cannot be written too (FailedPrecondition). "" matches any job.
  std::string job_identity;
  // Free heap (MiB) an idle shard gives back (common/heap_trimmer.h); 0:
  // never.
  int64_t heap_trim_min_mb = 0;
  // Connections to the shard's ports above this are shut down, silent ones
  // first, and a listener that stops accepting ends Run with exit code 3
  // (server/connection_guard.h); 0: no guard.
  int max_connections = 0;
  // Standby shards (server/replication.h; docs/design.md "Standby
  // shards"): the address of this shard's other process (empty: none),
  // whether this process is the shard's standby task, and the lease. The
  // process decides its role before it listens (server/standby_shard.h);
  // a standby restores no snapshot (it takes its primary's state), and a
  // deposed primary ends Run with exit code 3 to restart as the standby.
  std::string replica_peer;
  bool standby_task = false;
  // Notified when the process is asked to stop: the wait for a standby's
  // peer at start ends then (Create fails with CANCELLED). May be null.
  const absl::Notification* stop = nullptr;  // Not owned.
  absl::Duration standby_lease = absl::Seconds(1);
};

class ShardServer {
 public:
  // Restores (when there is a snapshot), starts serving and announces it.
  // Unavailable when the shard could not listen (the message says why) or
  // write its port file; any other error is a bad option (or a snapshot
  // that cannot be restored).
  static absl::StatusOr<std::unique_ptr<ShardServer>> Create(
      ShardServerOptions options);

  // Stops serving without the final snapshot if Run did not.
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // Blocks until `stop` is notified or, for a spec job, the job ends (or
  // the store aborts it); then answers waiting pulls, stops serving, writes
  // the final snapshot (and, for a spec job that ended well, marks the
  // checkpoint folder finished: MarkJobFinished) and logs the shard's
  // counters. Returns the exit
  // code: 0, or 1 when a spec job failed, or 3 when the listener stopped
  // accepting connections (the guard sent the process SIGTERM to get here).
  // Call at most once; `stop` may be notified before.
  int Run(const absl::Notification& stop);

  // The bound port and "host:port" of the first listen address.
  int port() const { return host_->port(); }
  std::string address() const { return host_->address(); }
  // Owned by the server; valid until it is destroyed.
  ParameterStore* store() const { return host_->store(); }

 private:
  explicit ShardServer(ShardServerOptions options);

  absl::Status Start();
  // Decides the role and makes the replica and its service, before the
  // host (options_.replica_peer set).
  absl::Status StartReplica();
  // The spec's log line and the job-control service, before the host.
  void AttachJobControl();
  // The "listening on" line and the port file.
  absl::Status Announce();
  JobEnd WaitUntilDone(const absl::Notification& stop);
  // A line "ps_server: shard k: <message>".
  void Log(const std::string& message) const;

  ShardServerOptions options_;
  // Job control of a spec job (null without a spec); declared before host_,
  // which serves job_service_, so that they outlive it.
  std::unique_ptr<JobState> job_;
  std::unique_ptr<grpc::Service> job_service_;
  // The shard-side L-BFGS of --mode=sandblaster (server/sandblaster_service.h);
  // null in the other modes. Outlives host_, which serves it.
  std::unique_ptr<grpc::Service> sandblaster_service_;
  // host_->store() for job_service_'s threads; null until host_ is set.
  std::atomic<ParameterStore*> serving_store_{nullptr};
  // Standby shards (null without a peer); before host_, which serves them.
  std::unique_ptr<ShardReplica> replica_;
  ShardReplica* replica_ptr_ = nullptr;  // replica_.get(), for the service.
  std::unique_ptr<grpc::Service> replication_service_;
  std::atomic<bool> deposed_{false};
  // host_.get() for the replica's thread; null until host_ is set.
  std::atomic<ParameterServerHost*> serving_host_{nullptr};
  std::unique_ptr<ParameterServerHost> host_;
  std::unique_ptr<HeapTrimmer> trimmer_;
  std::unique_ptr<Snapshotter> snapshotter_;  // Null without snapshots.
  std::unique_ptr<ConnectionGuard> guard_;    // Null without a cap.
  std::atomic<bool> listener_lost_{false};
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SHARD_SERVER_H_
