#include "server/ps_host.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "rpc/grpc_config.h"
#include "rpc/server_auth.h"

namespace downpour {
namespace {

// The host part of "host:port" (everything before the last ':'), so that
// "[::1]:0" gives "[::1]".
std::string HostPart(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

HostOpsOptions OpsOptions(const ParameterServerHostOptions& o) {
  HostOpsOptions ops;
  ops.security = o.security;
  ops.listen_addresses = o.listen_addresses;
  ops.shard_index = o.store.shard_index;
  ops.metrics_port = o.metrics_port;
  ops.metrics_bind = o.metrics_bind;
  ops.authenticator = o.authenticator;
  return ops;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServerHost>> ParameterServerHost::Create(
    const ParameterServerHostOptions& options) {
  if (options.listen_addresses.empty()) {
    return absl::InvalidArgumentError("no address to listen on");
  }
  if (options.service.debug_drop_reply_every < 0) {
    return absl::InvalidArgumentError("debug_drop_reply_every must be >= 0");
  }
  DP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      BuildServerCredentials(options.security));
  std::unique_ptr<ParameterServerHost> host(new ParameterServerHost());
  host->listen_addresses_ = options.listen_addresses;
  DP_ASSIGN_OR_RETURN(host->store_, ParameterStore::Create(options.store));
  if (options.prepare_store) {
    DP_RETURN_IF_ERROR(options.prepare_store(host->store_.get()));
  }
  ParameterServerHost* const raw = host.get();
  DP_ASSIGN_OR_RETURN(host->ops_, HostOps::Create(OpsOptions(options),
                                                  host->store_.get(),
                                                  [raw] { raw->SetServing(true); }));
  // The token is checked from a call's headers, before its body is read.
  credentials = WithTokenCheck(std::move(credentials), options.security,
                               host->ops_->shared_authenticator());
  ServiceOptions service_options = options.service;
  service_options.require_task_certificates =
      options.security.require_task_certificates;
  service_options.authenticator = host->ops_->authenticator();
  service_options.observer = host->ops_->observer();
  host->service_ = NewParameterServerService(host->store_.get(), service_options);

  grpc::ServerBuilder builder;
  // ServerBuilder writes each bound port through its pointer at start.
  host->ports_.assign(options.listen_addresses.size(), 0);
  for (size_t a = 0; a < options.listen_addresses.size(); ++a) {
    builder.AddListeningPort(options.listen_addresses[a], credentials,
                             &host->ports_[a]);
  }
  builder.RegisterService(host->service_.get());
  for (grpc::Service* extra : options.extra_services) {
    builder.RegisterService(extra);
  }
  ConfigureServerBuilder(&builder);
  ConfigureServerLimits(options.limits, &builder);
  host->ops_->ConfigureBuilder(&builder);
  grpc::EnableDefaultHealthCheckService(true);  // grpc.health.v1.Health
  host->server_ = builder.BuildAndStart();
  if (host->server_ != nullptr) {
    host->SetServing(host->store_->shard_map().ok());  // Restored
  }
  for (size_t a = 0; a < options.listen_addresses.size(); ++a) {
    if (host->server_ == nullptr || host->ports_[a] == 0) {
      // With no server there is nothing to shut down; the destructor
      // handles a started one.
      return absl::UnavailableError(absl::StrCat(
          "could not listen on ", options.listen_addresses[a]));
    }
  }
  return host;
}

ParameterServerHost::~ParameterServerHost() {
  Shutdown();
  Wait();
}

void ParameterServerHost::SetServing(bool serving) {
  if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(serving);
  }
}

int ParameterServerHost::metrics_port() const { return ops_->metrics_port(); }

std::string ParameterServerHost::address(int i) const {
  return absl::StrCat(HostPart(listen_addresses_[i]), ":", ports_[i]);
}

void ParameterServerHost::Shutdown(absl::Duration grace) {
  absl::MutexLock l(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  SetServing(false);  // Draining: health checks see NOT_SERVING first.
  // Calls through shared memory, then waiting pulls: gRPC's shutdown waits
  // for every call to finish.
  if (service_ != nullptr) StopSharedCalls(service_.get());
  if (store_ != nullptr) store_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
  }
}

void ParameterServerHost::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace downpour
