// File: server/replication.h
//
// Standby shards: one shard held by two processes, a primary that serves the
// workers and a standby that applies every change the primary forwards, so
// that the standby takes over, with nothing acknowledged lost, when the
// primary dies. This is the logic, with no RPC in it; the other process is
// reached through a ReplicaPeer (gRPC: server/replication_grpc.h) and the
// shard's store through ReplicaShard (server/standby_shard.h).
//
// Roles (docs/design.md, "Standby shards", has the argument):
//  * primary: every change (a push, a leave, a declaration) is forwarded to
//    the standby and applied there before it is applied here and
//    acknowledged (ReplicateAndApply). A forward or heartbeat that fails:
//    when the standby's address refuses connections (no process listens:
//    it is dead, so it never promoted), or the standby answers that it
//    holds no state and is not joining (ABORTED), the primary goes on alone
//    ("runs without a standby") and takes the standby back when it rejoins;
//    on any other failure (a partition, a timeout, a standby still taking
//    the join's state) the primary fences itself: it refuses workers until
//    it reaches the standby again at its own epoch, or learns that it was
//    deposed (then `on_deposed` runs: the process exits 3 and restarts as
//    the standby). A change whose forward failed that way may or may not
//    have been applied there: the primary applies it too (without
//    acknowledging it) and forwards it again before it serves again.
//  * standby: refuses workers (UNAVAILABLE, so they try the other address),
//    applies forwards of its primary's epoch, refuses lower epochs. It
//    promotes itself (epoch + 1) when its primary's address refuses
//    connections, or when it heard nothing for a whole lease after at least
//    one forward or heartbeat since it joined (a standby that hears nothing
//    within a lease of its join drops the state and joins again). While it
//    takes a join's state it answers UNAVAILABLE (the primary fences).
// A primary never acknowledges a change its standby has not applied, fences
// itself after a third of a lease without contact, and a standby promotes
// only after a whole lease (or when its primary is gone): two processes
// never both take writes.
//
//   ShardReplica::Create(options, peer, shard)  // role decided by the caller
//   service: ReplicaGate() before a worker's call; ReplicateAndApply(...)
//   replication service: Hello / Join / Forward / Heartbeat
//
// Thread-safety: every method may be called from any thread.
#ifndef DOWNPOUR_SERVER_REPLICATION_H_
#define DOWNPOUR_SERVER_REPLICATION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

enum class ReplicaRole { kStarting, kPrimary, kStandby, kFenced };
const char* ReplicaRoleName(ReplicaRole role);

// What a change forwarded to the standby is (the worker's request bytes).
enum class ForwardKind { kPush, kDeclare };

// The other process of the shard as it answers Hello.
struct PeerState {
  ReplicaRole role = ReplicaRole::kStarting;
  uint64_t epoch = 0;
  bool attached = false;     // A standby holding a primary's state.
  bool has_standby = false;  // A primary with a standby in step.
};

// A primary's state for a joining standby.
struct JoinState {
  uint64_t epoch = 0;
  uint64_t server_incarnation = 0;
  bool declared = false;
  std::string snapshot;  // Snapshot file bytes; empty when !declared.
  int64_t pushes_applied = 0;
  int64_t pushes_duplicate = 0;
};

// The other process. Errors: UNAVAILABLE or DEADLINE_EXCEEDED when it was
// not reached, FAILED_PRECONDITION when it refused the caller's epoch (the
// message says which epoch it is at).
class ReplicaPeer {
 public:
  virtual ~ReplicaPeer() = default;
  virtual absl::StatusOr<PeerState> Hello(absl::Duration timeout) = 0;
  virtual absl::StatusOr<JoinState> Join(absl::Duration timeout) = 0;
  virtual absl::Status Forward(uint64_t epoch, ForwardKind kind,
                               const std::string& request,
                               absl::Duration timeout) = 0;
  virtual absl::Status Heartbeat(uint64_t epoch, absl::Duration timeout) = 0;
  // True when a TCP connection to the peer's address is refused within
  // `timeout` (nobody listens there); false when it connects or times out.
  virtual bool Refuses(absl::Duration timeout) = 0;
  // "host:port", for the log.
  virtual std::string address() const = 0;
};

// The shard this process holds, as replication needs it.
struct ReplicaShard {
  // Standby: applies a forwarded request (its result is the primary's too:
  // an error here is not a failure of replication).
  std::function<absl::Status(ForwardKind, const std::string&)> apply;
  // Primary: the state a joining standby starts from (called with every
  // change held back).
  std::function<absl::StatusOr<JoinState>()> export_state;
  // Standby: takes a primary's state (before any forward is applied).
  // (The state travels in one message: a shard whose snapshot is over
  // kMaxJoinBytes cannot take a standby.)
  std::function<absl::Status(const JoinState&)> import_state;
};

struct ReplicaOptions {
  int shard_index = 0;
  // The role the process starts in: kPrimary (alone until a standby joins)
  // or kStandby (joins its primary first).
  ReplicaRole start_role = ReplicaRole::kPrimary;
  uint64_t epoch = 1;  // A primary's epoch at start.
  // The shard's incarnation as workers see it (a standby takes its
  // primary's when it joins).
  uint64_t server_incarnation = 1;
  // A standby promotes after this long without word from its primary; a
  // primary fences itself after a third of it.
  absl::Duration lease = absl::Seconds(1);
  // "ps_server: shard k: ..." lines.
  std::function<void(const std::string&)> log;
  // A deposed primary's way out (the server exits 3 to restart as the
  // standby). May be null.
  std::function<void()> on_deposed;
  // Called once this process promoted itself (on the replica's thread, no
  // lock held; the server turns its health to SERVING). May be null.
  std::function<void()> on_promoted;
};

class ShardReplica {
 public:
  // The largest join snapshot (it travels in one gRPC message, whose limit
  // is 64 MiB: rpc/grpc_config.h).
  static constexpr size_t kMaxJoinBytes = (64u << 20) - (1u << 20);
  static constexpr double kForwardBytesPerSecond = 32.0 * (1 << 20);

  // Starts the replica's timer thread (heartbeats, leases, joining).
  static absl::StatusOr<std::unique_ptr<ShardReplica>> Create(
      ReplicaOptions options, std::unique_ptr<ReplicaPeer> peer,
      ReplicaShard shard);
  ~ShardReplica();
  ShardReplica(const ShardReplica&) = delete;
  ShardReplica& operator=(const ShardReplica&) = delete;

  // Before a worker's call: OK on a serving primary; UNAVAILABLE naming the
  // role otherwise (a worker then tries the shard's other address).
  absl::Status AdmitClient() const ABSL_LOCKS_EXCLUDED(mu_);

  // A primary's change: forwarded to the standby (when there is one), then
  // `apply_here` runs, with joins held off meanwhile. UNAVAILABLE without
  // running apply_here when this process is not a serving primary or the
  // standby could not be reached.
  absl::Status ReplicateAndApply(ForwardKind kind, const std::string& request,
                                 const std::function<absl::Status()>& apply_here)
      ABSL_LOCKS_EXCLUDED(mu_, change_mu_);

  // The replication service's calls.
  PeerState Hello() const ABSL_LOCKS_EXCLUDED(mu_);
  // RESOURCE_EXHAUSTED (and no standby taken) when the snapshot is over
  // `max_snapshot_bytes`.
  absl::StatusOr<JoinState> OnJoin(
      size_t max_snapshot_bytes = std::numeric_limits<size_t>::max())
      ABSL_LOCKS_EXCLUDED(mu_, change_mu_);
  // `abandoned` (may be null): true once the caller gave up on the call
  // (cancelled, past its deadline); the change is then not applied.
  absl::Status OnForward(uint64_t epoch, ForwardKind kind,
                         const std::string& request,
                         const std::function<bool()>& abandoned = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  absl::Status OnHeartbeat(uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);

  ReplicaRole role() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t server_incarnation() const ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the timer thread (a stopping server stops replicating).
  void Stop() ABSL_LOCKS_EXCLUDED(stop_mu_);

 private:
  ShardReplica(ReplicaOptions options, std::unique_ptr<ReplicaPeer> peer,
               ReplicaShard shard);
  void Loop() ABSL_LOCKS_EXCLUDED(stop_mu_);
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // A standby's join of its primary.
  void TryJoin() ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  // A fenced primary's retry: changes of uncertain fate forwarded again,
  // then a heartbeat.
  void TickFenced(uint64_t epoch, uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_);
  // A primary's reaction to a failed forward or heartbeat sent at `epoch`
  // to the standby of join `gen`.
  void OnPeerFailure(const absl::Status& failure, uint64_t epoch,
                     uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_);
  void RunAlone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A standby's check of a forward or heartbeat from `epoch`.
  absl::Status CheckCall(uint64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Promote(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(const std::string& line) const;
  absl::Duration Heartbeat() const { return options_.lease / 10; }
  absl::Duration RpcTimeout() const { return options_.lease / 4; }
  // A forward's deadline: RpcTimeout() plus the time to move its bytes at
  // kForwardBytesPerSecond.
  absl::Duration ForwardTimeout(size_t bytes) const;

  const ReplicaOptions options_;
  const std::unique_ptr<ReplicaPeer> peer_;
  const ReplicaShard shard_;

  mutable absl::Mutex mu_;
  ReplicaRole role_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;     // Standby: joined.
  // Standby: a join is under way (state not taken yet).
  bool joining_ ABSL_GUARDED_BY(mu_) = false;
  // Standby: a forward or heartbeat came since the join.
  bool confirmed_ ABSL_GUARDED_BY(mu_) = false;
  bool has_standby_ ABSL_GUARDED_BY(mu_) = false;  // Primary.
  bool deposed_ ABSL_GUARDED_BY(mu_) = false;
  // Primary: raised by each join, so that the answer to a call sent to an
  // earlier standby does not drop the one that joined since.
  uint64_t standby_gen_ ABSL_GUARDED_BY(mu_) = 0;
  // Primary: changes whose forward failed with the outcome unknown (applied
  // here, not acknowledged), forwarded again before serving again.
  struct Uncertain {
    ForwardKind kind;
    std::string request;
  };
  std::map<uint64_t, Uncertain> uncertain_ ABSL_GUARDED_BY(mu_);
  uint64_t next_uncertain_ ABSL_GUARDED_BY(mu_) = 0;
  // Standby (timer thread only): no join before next_join_; the wait
  // doubles with each failed join.
  absl::Time next_join_ = absl::InfinitePast();
  absl::Duration join_backoff_ = absl::ZeroDuration();
  // Primary: the last forward or heartbeat the standby answered; standby:
  // the last one received.
  absl::Time last_contact_ ABSL_GUARDED_BY(mu_);
  // Primary: when it fenced itself.
  absl::Time fenced_since_ ABSL_GUARDED_BY(mu_);

  // Primary: changes hold it shared; a join exclusively, so its state
  // has every change applied here and none still to forward.
  absl::Mutex change_mu_;
  // Standby: a join holds it exclusively while it takes the state;
  // forwards shared.
  absl::Mutex apply_mu_;

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_REPLICATION_H_
