// File: worker/shard_transport.h
//
// The gRPC parameter client's connections to its shards, and the calls it
// fans out over them. Each shard gets `connections_per_shard` channels, each
// its own TCP connection, with a generic stub for the bulk methods (raw
// byte buffers, rpc/wire.h) and, on the first, the typed ParameterServer
// stub for the small ones. Calls go out through rpc/fan_out.h with the
// client's deadline, retry policy and calls in flight per connection:
// fixed, or sized from the measured throughput of whole-model exchanges
// (worker/adaptive_window.h).
//
// Standby shards (server/replication.h): when a shard has a standby address,
// the shard's calls go to one of its two addresses, the primary's at first;
// a call that fails UNAVAILABLE moves the shard to the other address for
// its retry (a standby refuses workers while its primary serves, a fenced or
// dead primary refuses or does not answer), and the first call that
// succeeds at a new address logs one line "worker: shard k failed over to
// <address>" (the push dedup makes a retried push apply once).
//
//   ShardTransport transport(options, security);
//   DP_RETURN_IF_ERROR(transport.CallAllParts("Pull", kPullMethod, parts,
//                                             req, &resp, read_reply));
//
// Thread-safety: its calls may run on several threads at once (a sync
// push's carried pulls go on while the rest of the push goes,
// worker/carried_pulls.h); the callbacks of its calls run on gRPC's
// threads.
#ifndef DOWNPOUR_WORKER_SHARD_TRANSPORT_H_
#define DOWNPOUR_WORKER_SHARD_TRANSPORT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/shard_stats.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/fan_out.h"
#include "worker/adaptive_window.h"
#include "worker/part_plan.h"
#include "worker/shared_call_client.h"

namespace downpour {

struct ShardTransportOptions {
  // host:port of shard 0, 1, ... in order.
  std::vector<std::string> hosts;
  // The standby of each shard, same order (empty: none).
  std::vector<std::string> standby_hosts;
  // Channels (TCP connections) per shard, >= 1.
  int connections_per_shard = 1;
  // Calls in flight per connection; 0: no limit; -1: sized from measured
  // throughput.
  int max_calls_in_flight_per_connection = 1;
  // Deadline of each call but those given their own.
  absl::Duration rpc_timeout = absl::Seconds(60);
  RetryPolicy retry;
};

// Consumes the reply of part (or shard) i.
using OnReply = std::function<absl::Status(int)>;

class ShardTransport {
 public:
  // Creates the channels (they connect on first use). `security` must have
  // passed CheckTargetIsSafe for every host.
  ShardTransport(const ShardTransportOptions& options,
                 const ClientSecurity& security);

  int num_shards() const { return static_cast<int>(options_.hosts.size()); }
  // Pushes and push-pulls to the shards `calls` serves go through the
  // worker's shared region instead of gRPC (null: none; not owned, must
  // outlive its use here).
  void set_shared_calls(SharedCallClient* calls) { calls_ = calls; }
  int connections_per_shard() const { return options_.connections_per_shard; }
  // The typed stub of `shard` (its first channel) at its current address.
  proto::ParameterServer::Stub* stub(int shard) const {
    return stubs_[Active(shard)][shard].get();
  }
  // How errors name `shard`: "shard 1 (10.0.0.2:5000)", at its current
  // address.
  std::string ShardName(int shard) const;
  // The address a shard's calls go to: 0 its primary's, 1 its standby's.
  int Active(int shard) const {
    return active_ == nullptr ? 0 : active_[shard].load();
  }
  // `done` of a call to `shard` started at address `at` (0 primary, 1
  // standby): moves the shard to its other address after UNAVAILABLE, and
  // logs a failover on the first success at a new address.
  std::function<void(grpc::Status)> Track(int shard, int at,
                                          std::function<void(grpc::Status)> done) const;

  // Runs `calls` with this transport's window and retry policy, each
  // attempt with `timeout`; wait_for_ready waits for servers still starting.
  absl::Status Run(const FanOutCalls& calls, absl::Duration timeout,
                   bool wait_for_ready) const;
  // Waits until every shard answers GetStats, up to connect_timeout (or
  // until *stop_requested, when set), telling on_wait (when set) every few
  // seconds, and checks that shard s is the s-th address with the right
  // shard count.
  absl::Status WaitUntilAnswering(
      absl::Duration connect_timeout, const std::atomic<bool>* stop_requested,
      const std::function<void(const std::string&)>& on_wait) const;

  // Tells each shard that worker `worker_id` (of incarnation
  // `incarnation`) has finished: a leave Push.
  absl::Status LeaveEach(int32_t worker_id, uint64_t incarnation) const;
  // Each shard's GetStats, in shard order.
  absl::StatusOr<std::vector<ShardStats>> StatsOfEach() const;

  // FanOutCalls for parts[which[k]], k = 0 .. which.size() - 1: what,
  // count, peer_of and lane_of set; `which` must outlive them.
  FanOutCalls PartCalls(const char* what, absl::Span<const Part> parts,
                        absl::Span<const int> which) const;

  // Calls `what` once per shard (call s to shard s, started by `start` on
  // stub(s)) with rpc_timeout; reset(s) clears reply s before a retry.
  absl::Status CallEachShard(const char* what, const StartCallFn& start,
                             const std::function<void(int)>& reset) const;
  // Sends req[i] as bulk method `method` (rpc/grpc_config.h) over part i's
  // connection, resp[i] receiving the reply, for each i in `which`;
  // on_ok(i) consumes it (FanOutCalls::on_ok; may be null).
  absl::Status CallParts(const char* what, const char* method,
                         absl::Span<const Part> parts,
                         absl::Span<const int> which,
                         const std::vector<grpc::ByteBuffer>& req,
                         std::vector<grpc::ByteBuffer>* resp,
                         const OnReply& on_ok) const;
  // CallParts with method methods[i] for part i.
  absl::Status CallParts(const char* what,
                         absl::Span<const char* const> methods,
                         absl::Span<const Part> parts,
                         absl::Span<const int> which,
                         const std::vector<grpc::ByteBuffer>& req,
                         std::vector<grpc::ByteBuffer>* resp,
                         const OnReply& on_ok) const;
  // CallParts for every part: one whole-model exchange, whose bytes (both
  // ways) and time size the window when it is adaptive.
  absl::Status CallAllParts(const char* what, const char* method,
                            absl::Span<const Part> parts,
                            const std::vector<grpc::ByteBuffer>& req,
                            std::vector<grpc::ByteBuffer>* resp,
                            const OnReply& on_ok);

 private:
  // CallParts with method_of(i) for part i.
  absl::Status CallPartsWith(const char* what,
                             const std::function<const char*(int)>& method_of,
                             absl::Span<const Part> parts,
                             absl::Span<const int> which,
                             const std::vector<grpc::ByteBuffer>& req,
                             std::vector<grpc::ByteBuffer>* resp,
                             const OnReply& on_ok) const;

  const ShardTransportOptions options_;
  // Null unless max_calls_in_flight_per_connection is -1.
  const std::unique_ptr<AdaptiveWindow> adaptive_;
  // stubs_[address][shard]; address 1 only with standbys.
  std::vector<std::vector<std::unique_ptr<proto::ParameterServer::Stub>>> stubs_;
  // generic_[address][shard][connection].
  std::vector<std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>>>
      generic_;
  // Per shard: the address calls go to, and the last one that answered
  // (null without standbys).
  std::unique_ptr<std::atomic<int>[]> active_;
  std::unique_ptr<std::atomic<int>[]> answered_;
  SharedCallClient* calls_ = nullptr;  // Not owned.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SHARD_TRANSPORT_H_
