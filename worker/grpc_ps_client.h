// File: worker/grpc_ps_client.h
//
// ParameterClient over gRPC: one channel per shard; every Pull and Push goes
// to all shards at once (asynchronous calls in flight together), with
// per-call deadlines and retries of transient failures.
//
//   GrpcClientOptions o;
//   o.hosts = {"127.0.0.1:5000", "127.0.0.1:5001"};
//   o.worker_id = 0;
//   DP_ASSIGN_OR_RETURN(auto client, NewGrpcParameterClient(o));
#ifndef DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_
#define DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "worker/ps_client.h"

namespace downpour {

struct GrpcClientOptions {
  // host:port of shard 0, 1, ... in order.
  std::vector<std::string> hosts;
  int32_t worker_id = 0;
  // Deadline of one Pull/Push call.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // How long Declare waits for servers that are not up yet.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Attempts for calls failing with UNAVAILABLE or DEADLINE_EXCEEDED.
  int max_attempts = 5;
};

absl::StatusOr<std::unique_ptr<ParameterClient>> NewGrpcParameterClient(
    const GrpcClientOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_GRPC_PS_CLIENT_H_
