// File: server/replication_grpc.h
//
// The gRPC face of standby shards (server/replication.h): the Replication
// service (proto/replication.proto) a shard process serves beside the
// parameter-server service, a thin adapter over ShardReplica, and the
// ReplicaPeer that reaches the shard's other process over gRPC. Calls are
// authenticated as the ParameterServer service's are: the job's token (the
// authenticator given) and, with mutual TLS, the caller's certificate: a
// shard's own task certificate (ps-<k>), a job-wide one unless task
// certificates are required, or none on plaintext (rpc/peer_identity.h).
//
//   auto service = NewReplicationService(replica, auth, shard, strict);
//   DP_ASSIGN_OR_RETURN(auto peer, NewGrpcReplicaPeer(address, security, k));
//
// Thread-safety: the service's handlers run on gRPC's threads; a peer's
// methods may be called from any thread.
#ifndef DOWNPOUR_SERVER_REPLICATION_GRPC_H_
#define DOWNPOUR_SERVER_REPLICATION_GRPC_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/impl/codegen/service_type.h"
#include "rpc/auth_token.h"
#include "rpc/credentials.h"
#include "server/replication.h"

namespace downpour {

// `replica` (a pointer to where it will be, so the service can be built
// first) and `authenticator` (may be null: no token) must outlive the
// service. Until *replica is set every call is UNAVAILABLE.
std::unique_ptr<grpc::Service> NewReplicationService(
    ShardReplica* const* replica, const TokenAuthenticator* authenticator,
    int shard_index, bool require_task_certificates);

// Shard `shard_index`'s other process at `address`, with the job's client
// security.
absl::StatusOr<std::unique_ptr<ReplicaPeer>> NewGrpcReplicaPeer(
    const std::string& address, const TransportSecurityOptions& security,
    int shard_index);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_REPLICATION_GRPC_H_
