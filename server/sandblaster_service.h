// File: server/sandblaster_service.h
//
// The gRPC adapter of a shard's Sandblaster L-BFGS side
// (proto/sandblaster.proto's SandblasterShard over server/lbfgs_shard.h):
// ShardServer registers it next to ParameterServer when the shard runs
// --mode=sandblaster. The LbfgsShard is made on the first call after the
// model is declared, sized to the shard; it loads and publishes through the
// store (ParameterStore::Pull, ParameterStore::Overwrite), so workers pull
// the current point with the ordinary Pull. It also keeps the address of
// the chief's coordinator, which the chief registers and the other workers
// ask for.
//
//   std::unique_ptr<grpc::Service> s = NewSandblasterShardService(
//       [&] { return store; }, authenticator, {num_workers, strict});
//   host_options.extra_services.push_back(s.get());
//
// Who may call what (rpc/peer_identity.h; the token is checked from the
// headers by the host's credentials, rpc/server_auth.h): Run and
// SetCoordinator only as worker 0, the chief (CheckActsForWorker(peer, 0)),
// Accumulate only as its request's worker_id, GetCoordinator anyone with
// the token.
//
// Thread-safety: calls run concurrently on gRPC's threads. A bad request
// (wrong size, unknown vector, non-finite value, worker id outside the
// job) is answered with an error and changes nothing of the shard's state.
#ifndef DOWNPOUR_SERVER_SANDBLASTER_SERVICE_H_
#define DOWNPOUR_SERVER_SANDBLASTER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "rpc/auth_token.h"
#include "server/parameter_store.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace downpour {

struct SandblasterShardServiceOptions {
  // The job's workers (ids 0..num_workers-1); at least 1.
  int32_t num_workers = 1;
  // --require_task_certificates: a job-wide certificate may not act for a
  // worker.
  bool require_task_certificates = false;
};

// `store` returns the serving store (null before the host made it); `auth`
// (not owned, may be null) checks the job's token on every call.
std::unique_ptr<grpc::Service> NewSandblasterShardService(
    std::function<ParameterStore*()> store, const TokenAuthenticator* auth,
    SandblasterShardServiceOptions options);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SANDBLASTER_SERVICE_H_
