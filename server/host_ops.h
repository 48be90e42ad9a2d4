// File: server/host_ops.h
//
// The security-and-operations parts of a parameter-server host, kept apart
// from server/ps_host.cc so that the host calls them with a few lines: the
// safe-by-default listen check, the bearer-token authenticator, the
// Prometheus metrics (server/ps_metrics.h) and their endpoint.
//
//   DP_ASSIGN_OR_RETURN(auto ops, HostOps::Create(options, store, on_declared));
//   service_options.authenticator = ops->authenticator();
//   service_options.observer = ops->observer();
//   ops->ConfigureBuilder(&builder);   // interceptors when metrics are on
//
// Thread-safety: read-only after Create.
#ifndef DOWNPOUR_SERVER_HOST_OPS_H_
#define DOWNPOUR_SERVER_HOST_OPS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server_builder.h"
#include "rpc/auth_token.h"
#include "rpc/credentials.h"
#include "server/parameter_store.h"
#include "server/service_observer.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace downpour {

class MetricsEndpoint;
class ServerMetrics;

struct HostOpsOptions {
  TransportSecurityOptions security;
  std::vector<std::string> listen_addresses;
  int shard_index = 0;
  // Prometheus endpoint: -1 off, 0 a free port.
  int metrics_port = -1;
  std::string metrics_bind = "127.0.0.1";
  // Shared with other services; null: made from `security`.
  std::shared_ptr<const TokenAuthenticator> authenticator;
};

class HostOps : public ServiceObserver {
 public:
  // FailedPrecondition for a plaintext non-loopback address (see
  // CheckListenAddressIsSafe); InvalidArgument for an unreadable token file;
  // Unavailable when the metrics port cannot be bound. `store` must outlive
  // the result; `on_declared` runs after each successful declaration.
  static absl::StatusOr<std::unique_ptr<HostOps>> Create(
      const HostOpsOptions& options, const ParameterStore* store,
      std::function<void()> on_declared);
  ~HostOps() override;

  const TokenAuthenticator* authenticator() const { return auth_.get(); }
  std::shared_ptr<const TokenAuthenticator> shared_authenticator() const {
    return auth_;
  }
  ServiceObserver* observer() { return this; }
  // Adds the metrics interceptors (when metrics are on).
  void ConfigureBuilder(grpc::ServerBuilder* builder);
  // The bound metrics port, or -1 when off.
  int metrics_port() const;

  void OnDeclared() override;
  void OnPush(const PushEvent& event) override;
  void OnSharedCall(const char* method, absl::StatusCode code,
                    absl::Duration latency, int64_t received_bytes,
                    int64_t sent_bytes) override;

 private:
  HostOps() = default;
  std::function<void()> on_declared_;
  std::shared_ptr<const TokenAuthenticator> auth_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ServerMetrics> metrics_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_HOST_OPS_H_
