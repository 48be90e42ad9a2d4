// File: server/grpc_service.h
//
// The gRPC face of one parameter-server shard: a thin adapter that turns
// requests into ParameterStore calls and Status into grpc::Status, nothing
// more. Only a factory is exposed. The settings both sides share (message
// limits, method names, credentials) are in rpc/; a whole server (store,
// service, grpc::Server) is assembled by server/ps_host.h.
//
//   auto service = NewParameterServerService(store.get());
//   grpc::ServerBuilder b;
//   ConfigureServerBuilder(&b);           // rpc/grpc_config.h
//   b.RegisterService(service.get());
#ifndef DOWNPOUR_SERVER_GRPC_SERVICE_H_
#define DOWNPOUR_SERVER_GRPC_SERVICE_H_

#include <cstdint>
#include <memory>

#include "grpcpp/impl/codegen/service_type.h"
#include "rpc/auth_token.h"
#include "server/parameter_store.h"
#include "server/replication.h"
#include "server/service_observer.h"

namespace downpour {

struct ServiceOptions {
  // Testing only: every Nth reply to a Pull, Push or PushPull is replaced,
  // after the request took effect, by UNAVAILABLE, as if it had been lost
  // on the network (clients retry; a retried push is not applied twice).
  // 0: never.
  int debug_drop_reply_every = 0;
  // The token check: when set (not owned; must outlive the
  // service), every handler first refuses a call without the job's token
  // (UNAUTHENTICATED, nothing read), and pushes/declarations are reported.
  const TokenAuthenticator* authenticator = nullptr;
  ServiceObserver* observer = nullptr;
  // Recovery: this server process's incarnation, sent in every DeclareModel,
  // Pull, Push and PushPull reply so that workers notice a restarted shard.
  // 0: NewParameterServerService draws a random nonzero one.
  uint64_t server_incarnation = 0;
  // Mutual TLS: a push or leave for worker k is taken only from the client
  // certificate "worker-<k>" (or one with no task name, unless this is set;
  // or with no client certificate at all), rpc/peer_identity.h.
  bool require_task_certificates = false;
  // Standby shards (server/replication.h; not owned, null: none): workers'
  // calls but GetStats are admitted only on a serving primary, every
  // change is replicated before it is applied, and replies carry the
  // replica's incarnation (the shard's, kept across failovers).
  ShardReplica* replica = nullptr;
};

// `store` must outlive the service. Handlers run on gRPC's callback threads;
// each does one bounded pass over the request's chunks.
std::unique_ptr<grpc::Service> NewParameterServerService(
    ParameterStore* store, const ServiceOptions& options = ServiceOptions());

// Ends the calls that reach `service` (made by NewParameterServerService)
// through workers' shared memory (server/shared_call_server.h): a shard
// shutting down stops them before its store, so that nothing is applied
// after its last snapshot; the workers go on by gRPC.
void StopSharedCalls(grpc::Service* service);

// A standby's application of a change its primary forwarded: `request` is
// a serialized PushRequest (a push, a push-pull's push or a leave) or
// DeclareModelRequest, applied to `store` as the service applies it.
absl::Status ApplyForwardedChange(ParameterStore* store, ForwardKind kind,
                                  const std::string& request);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_GRPC_SERVICE_H_
