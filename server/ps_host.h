// File: server/ps_host.h
//
// One parameter-server shard as a running gRPC server: owns the
// ParameterStore, the service adapting it (server/grpc_service.h) and the
// grpc::Server, and shuts them down in the one right order (waiting pulls
// answered first, then the server, then the service and store it uses).
// ps_server's main, the in-process benchmark cluster and the tests all
// assemble their servers here.
//
//   ParameterServerHostOptions o;
//   o.store.shard_index = 0;
//   o.store.num_shards = 1;
//   o.listen_addresses = {"127.0.0.1:0"};        // port 0: pick a free one
//   DP_ASSIGN_OR_RETURN(auto host, ParameterServerHost::Create(o));
//   client_options.hosts = {host->address()};   // "127.0.0.1:<bound port>"
//   ...
//   host->Shutdown();                            // or let the destructor
//
// Thread-safety: every method may be called from any thread; Shutdown is
// idempotent and Wait may run concurrently with it (e.g. main waits while a
// signal handler's thread shuts down).
#ifndef DOWNPOUR_SERVER_PS_HOST_H_
#define DOWNPOUR_SERVER_PS_HOST_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/auth_token.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "server/grpc_service.h"
#include "server/host_ops.h"
#include "server/parameter_store.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace downpour {

struct ParameterServerHostOptions {
  ParameterStoreOptions store;
  ServiceOptions service;
  // host:port addresses to listen on (at least one); port 0 picks a free
  // port, see ParameterServerHost::port().
  std::vector<std::string> listen_addresses = {"127.0.0.1:0"};
  TransportSecurityOptions security;
  // Security: the bearer-token check of the parameter-server service; null:
  // made here from `security`. Set it to share one authenticator with
  // extra_services, which must check it themselves (refusals then count
  // together in the metrics).
  std::shared_ptr<const TokenAuthenticator> authenticator;
  // More services on the same server (e.g. server/job_control.h's). Not
  // owned; each must outlive the host.
  std::vector<grpc::Service*> extra_services;
  // The Prometheus endpoint (-1 off, 0 a free port; README "Observability").
  int metrics_port = -1;
  std::string metrics_bind = "127.0.0.1";
  // gRPC memory quota and streams per connection (rpc/grpc_config.h; 0: no
  // limit).
  ServerLimits limits;
  // Called with the new store before the server listens (a restore from a
  // snapshot); an error fails Create. A store declared by it is SERVING from
  // the start.
  std::function<absl::Status(ParameterStore*)> prepare_store;
};

class ParameterServerHost {
 public:
  // Creates the store and starts serving. InvalidArgument for bad store or
  // service options, or no address; Unavailable when an address cannot be
  // listened on (the message is "could not listen on <address>").
  static absl::StatusOr<std::unique_ptr<ParameterServerHost>> Create(
      const ParameterServerHostOptions& options);

  // Shutdown() with the default grace period, then Wait().
  ~ParameterServerHost();

  ParameterServerHost(const ParameterServerHost&) = delete;
  ParameterServerHost& operator=(const ParameterServerHost&) = delete;

  // The port bound for listen_addresses[i].
  int port(int i = 0) const { return ports_[i]; }
  // listen_addresses[i] with its bound port, e.g. "127.0.0.1:40123".
  std::string address(int i = 0) const;
  // Owned by the host; valid until it is destroyed.
  ParameterStore* store() const { return store_.get(); }

  // The grpc.health.v1.Health status of every service of this server:
  // NOT_SERVING from the start until the first declaration (the host sets
  // SERVING then), and from Shutdown on. Called after a restore (SERVING)
  // and when draining (NOT_SERVING).
  void SetServing(bool serving);
  // The bound Prometheus port, or -1 when metrics are off.
  int metrics_port() const;

  // Answers every pull waiting on a sync step or the ssp bound (CANCELLED),
  // stops accepting calls and waits up to `grace` for those in flight, then
  // cancels the rest. Later calls do nothing.
  void Shutdown(absl::Duration grace = absl::Seconds(2))
      ABSL_LOCKS_EXCLUDED(shutdown_mu_);
  // Blocks until the server has shut down (someone called Shutdown).
  void Wait();

 private:
  ParameterServerHost() = default;

  std::vector<std::string> listen_addresses_;
  std::vector<int> ports_;  // Written by gRPC once, at BuildAndStart.
  // Destroyed in reverse order: the server before the service and store.
  std::unique_ptr<ParameterStore> store_;
  std::unique_ptr<HostOps> ops_;  // Token check, metrics; used by service_.
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PS_HOST_H_
