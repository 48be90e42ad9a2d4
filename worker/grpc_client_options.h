// File: worker/grpc_client_options.h
//
// Internal to the gRPC parameter client: the options its pieces
// (worker/shard_transport.h, worker/shared_route.h) take, made from
// GrpcClientOptions.
#ifndef DOWNPOUR_WORKER_GRPC_CLIENT_OPTIONS_H_
#define DOWNPOUR_WORKER_GRPC_CLIENT_OPTIONS_H_

#include "absl/status/statusor.h"
#include "rpc/credentials.h"
#include "worker/grpc_ps_client.h"
#include "worker/shard_transport.h"
#include "worker/shared_route.h"

namespace downpour {

ShardTransportOptions TransportOptions(const GrpcClientOptions& o);
SharedRouteOptions SharedRouteOptionsFor(const GrpcClientOptions& o);
// The client's security once its options are checked
// (CheckGrpcClientOptions) and each of its targets, standbys included, is
// safe to send to with it (CheckTargetIsSafe).
absl::StatusOr<ClientSecurity> CheckedSecurity(const GrpcClientOptions& o);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_GRPC_CLIENT_OPTIONS_H_
