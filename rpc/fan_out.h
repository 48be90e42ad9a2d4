// File: rpc/fan_out.h
//
// Runs a batch of asynchronous unary gRPC calls at once and waits for all of
// them: per-call deadlines, at most `window` calls in flight per connection
// (rpc/call_window.h), and calls that fail transiently started again after a
// backoff, as RetryPolicy says. Replies can be consumed as they arrive, on
// the completing gRPC thread, while other calls are still in flight. Nothing
// here knows what the calls carry: the caller starts each one on its own
// stub and names its peer for error messages.
//
//   FanOutCalls calls;
//   calls.what = "Push";
//   calls.count = n;
//   calls.peer_of = [&](int i) { return absl::StrCat("shard ", i); };
//   calls.lane_of = [&](int i) { return i; };
//   calls.start = [&](int i, grpc::ClientContext* ctx, auto done) {
//     stub[i]->UnaryCall(ctx, method, grpc::StubOptions(), &req[i], &resp[i],
//                        std::move(done));
//   };
//   calls.reset = [&](int i) { resp[i].Clear(); };
//   FanOutOptions o;
//   o.timeout = absl::Seconds(60);
//   DP_RETURN_IF_ERROR(FanOut(calls, o));
//
// Thread-safety: FanOut may run on several threads at once; the callbacks of
// one run are called from gRPC's threads and must be safe for that.
#ifndef DOWNPOUR_RPC_FAN_OUT_H_
#define DOWNPOUR_RPC_FAN_OUT_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace downpour {

// When a failed call is started again.
struct RetryPolicy {
  // Attempts for a call failing with UNAVAILABLE or DEADLINE_EXCEEDED (a
  // peer down or slow) or RESOURCE_EXHAUSTED (a server past its memory
  // quota resets calls that way; so is an oversize message refused, hence
  // never more than this).
  int max_attempts = 5;
  // Beyond max_attempts, UNAVAILABLE and DEADLINE_EXCEEDED are retried until
  // this long after the run's first failure, so that a caller rides through
  // a peer's restart. 0: only max_attempts.
  absl::Duration reconnect_timeout = absl::ZeroDuration();
  // The longest pause between rounds of attempts (RetryBackoff). Clients of
  // shards with standbys lower it: the other address may answer within a
  // fraction of a second.
  absl::Duration max_backoff = absl::Seconds(2);
};

// Whether a call that failed with `status` on attempt `attempt` (1 for the
// first), `since_first_failure` after the run's first failure, is started
// again.
bool ShouldRetry(const RetryPolicy& policy, const grpc::Status& status,
                 int attempt, absl::Duration since_first_failure);

// The pause after a round of attempt `attempt` that left calls to retry:
// 200 ms, doubling per attempt, at most `max_backoff`.
absl::Duration RetryBackoff(int attempt,
                            absl::Duration max_backoff = absl::Seconds(2));

// Starts call i with `ctx` (deadline and wait_for_ready already set);
// `done` must be called exactly once with the call's status, from any
// thread. It must not block.
using StartCallFn =
    std::function<void(int i, grpc::ClientContext* ctx,
                       std::function<void(grpc::Status)> done)>;

// The calls of one run, numbered 0 .. count - 1. peer_of, lane_of and start
// are required.
struct FanOutCalls {
  // Names the calls in errors: "<what> to <peer_of(i)>".
  const char* what = "";
  int count = 0;
  // Call i's peer as errors name it, e.g. "shard 1 (10.0.0.2:5000)".
  std::function<std::string(int)> peer_of;
  // Call i's connection: calls of one lane are started in order, at most
  // FanOutOptions::window at a time.
  std::function<int(int)> lane_of;
  StartCallFn start;
  // Clears call i's response before it is started again (may be null).
  std::function<void(int)> reset;
  // Consumes call i's reply once it succeeded (may be null). It runs on the
  // completing gRPC thread, after the lane's next call has started; an
  // error fails the whole run (the first such error is returned), and calls
  // not started by then never are.
  std::function<absl::Status(int)> on_ok;
};

struct FanOutOptions {
  // Deadline of each attempt of each call (to the millisecond).
  absl::Duration timeout = absl::Seconds(60);
  // Waits for a connection that is not ready yet instead of failing at once
  // (for peers that may still be starting up).
  bool wait_for_ready = false;
  // Calls in flight per lane; 0: no limit.
  int window = 0;
  RetryPolicy retry;
};

// Runs every call, retrying per options.retry, and returns once none is in
// flight. OK when every call succeeded and every on_ok returned OK; else the
// first error: an on_ok's, or a failed call's status as absl::Status, its
// message "<what> to <peer> [after N attempts]: <gRPC message>".
absl::Status FanOut(const FanOutCalls& calls, const FanOutOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_FAN_OUT_H_
