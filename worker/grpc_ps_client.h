// File: worker/grpc_ps_client.h
//
// ParameterClient over gRPC. Each shard's chunks are grouped into parts of at
// most `part_bytes`; every part of every shard is one call. The shards are
// served at once; on each of a shard's `connections_per_shard` TCP
// connections, at most `max_calls_in_flight_per_connection` calls are in
// flight. PushPull sends each part as one PushPull call, whose reply carries
// the part's values after the push. Payloads go out as slices pointing at
// the caller's memory (no copy for float32) and are read from the received
// slices straight into the caller's flat vector (rpc/wire.h). Per-call
// deadlines; transient failures are retried with the same (seq, part), which
// the servers apply at most once. A shard whose server restarted gets again
// the parts of a push that its previous process acknowledged. Before the
// first declaration it waits for every shard to answer, saying so every few
// seconds, and checks that --ps_hosts lists them in shard order.
//
// The pieces: worker/part_plan.h (cutting chunks into parts),
// worker/part_messages.h (each part's messages), rpc/fan_out.h (calls at
// once, with retries, backoff and calls in flight per connection),
// worker/shard_incarnations.h (shard restarts).
//
//   GrpcClientOptions o;
//   o.hosts = {"127.0.0.1:5000", "127.0.0.1:5001"};
//   o.worker_id = 0;
//   DP_ASSIGN_OR_RETURN(auto client, NewGrpcParameterClient(o));
#ifndef DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_
#define DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rpc/credentials.h"
#include "rpc/wire.h"
#include "worker/ps_client.h"

namespace downpour {

struct GrpcClientOptions {
  // host:port of shard 0, 1, ... in order.
  std::vector<std::string> hosts;
  // The standby of each shard, same order; empty: none. A shard's calls
  // fail over between its two addresses (worker/shard_transport.h).
  std::vector<std::string> standby_hosts;
  // Must match the servers' (rpc/credentials.h).
  TransportSecurityOptions security;
  int32_t worker_id = 0;
  // This process's incarnation, sent with every push so that a
  // restarted worker's pushes start a new sequence (server/push_dedup.h).
  // NewGrpcParameterClient draws a random nonzero one when it is 0.
  uint64_t incarnation = 0;
  // Deadline of one Pull/Push call.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // How long the first Declare waits for servers that are not up yet, in
  // all: it asks each shard for its statistics until it answers, then
  // declares. Past it, Unavailable: "shard i at host:port did not answer
  // within <t> (--connect_timeout_s): <gRPC's last error>".
  absl::Duration connect_timeout = absl::Seconds(60);
  // Called while the first Declare waits for a shard, after 1 s and then
  // every 3 s: "waiting for shard 1 at 10.0.0.2:5000 (4 s)". May be null.
  std::function<void(const std::string&)> on_wait;
  // Polled (every 250 ms at most) while the first Declare waits for the
  // servers: once true, the wait ends with Cancelled "stopped while waiting
  // for shard i at host:port". Not owned; may be null.
  const std::atomic<bool>* stop_requested = nullptr;
  // Attempts for calls failing with UNAVAILABLE, DEADLINE_EXCEEDED or
  // RESOURCE_EXHAUSTED (RetryPolicy, rpc/fan_out.h).
  int max_attempts = 5;
  // Beyond max_attempts, keep retrying such calls (backoff up to
  // 2 s) until this long after the first failure, so that a worker rides
  // through a shard's restart (ps_worker --reconnect_timeout_s). 0: only
  // max_attempts.
  absl::Duration reconnect_timeout = absl::ZeroDuration();
  // Largest payload of one call (bytes). A shard's chunks are grouped, in
  // order, into parts of at most this (a chunk larger than it is a part of
  // its own); must stay below kMaxMessageBytes
  // (rpc/grpc_config.h).
  int64_t part_bytes = int64_t{1} << 20;
  // TCP connections per shard; parts are dealt over them round-robin.
  // 0: two for a single shard, one each for more, so that two calls or more
  // are in flight at once.
  int connections_per_shard = 0;
  // Calls in flight on one connection at a time; the others queue and start
  // as earlier ones complete. 0: no limit. The defaults (1 MiB parts, one
  // call in flight per connection) keep what a shard has in flight small
  // enough to stay in the CPU cache, so that the bytes a server receives are
  // still cached when its optimizer reads them, and those it writes still
  // cached when a PushPull sends them back. Over a network with a large
  // bandwidth-delay product, allow more calls in flight. -1: start at 1 and
  // size it from each whole-model exchange's measured throughput
  // (worker/adaptive_window.h; ps_worker's default).
  int max_calls_in_flight_per_connection = 1;
  // Encoding of pushed gradients and of pulled parameters on the wire.
  wire::Encoding push_encoding = wire::Encoding::kRawF32;
  wire::Encoding pull_encoding = wire::Encoding::kRawF32;
  // A Pull into a parameter vector of at least this many bytes writes it
  // with non-temporal stores (wire::Store::kStreaming): a vector larger than
  // the last-level cache would be evicted before use anyway, and streaming
  // skips reading every destination line first. 0 streams every pull.
  int64_t streaming_pull_min_bytes = int64_t{32} << 20;
  // Payloads to shards on this host's loopback travel through a
  // shared-memory region of this process (rpc/shared_memory.h,
  // worker/shared_route.h) when those shards can map it: float32 only, no
  // standbys. gRPC then carries only the small fields of each call.
  bool shared_memory = true;
  // With shared_memory: pushes and push-pulls to those shards go through
  // the region too, as calls in its slots woken by futexes
  // (rpc/shared_calls.h), leaving gRPC out; pulls stay on gRPC.
  bool shared_memory_calls = true;
  // One-line notes for the worker's log (which shards take shared memory,
  // or why none does). May be null.
  std::function<void(const std::string&)> on_note;
};

// InvalidArgument naming the first option out of range (no addresses, an
// address without a port, a standby list of another length, ...).
absl::Status CheckGrpcClientOptions(const GrpcClientOptions& options);

absl::StatusOr<std::unique_ptr<ParameterClient>> NewGrpcParameterClient(
    const GrpcClientOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_
