#include "server/host_ops.h"

#include <utility>

#include "common/metrics_endpoint.h"
#include "common/status_macros.h"
#include "prometheus/registry.h"
#include "server/ps_metrics.h"

namespace downpour {

absl::StatusOr<std::unique_ptr<HostOps>> HostOps::Create(
    const HostOpsOptions& options, const ParameterStore* store,
    std::function<void()> on_declared) {
  for (const std::string& address : options.listen_addresses) {
    DP_RETURN_IF_ERROR(CheckListenAddressIsSafe(address, options.security));
  }
  DP_RETURN_IF_ERROR(CheckMetricsPort(options.metrics_port));
  std::unique_ptr<HostOps> ops(new HostOps());
  ops->on_declared_ = std::move(on_declared);
  ops->auth_ = options.authenticator;
  if (ops->auth_ == nullptr) {
    DP_ASSIGN_OR_RETURN(ops->auth_, TokenAuthenticator::Create(options.security));
  }
  if (options.metrics_port < 0) return ops;
  ops->registry_ = std::make_shared<prometheus::Registry>();
  ops->metrics_ = std::make_shared<ServerMetrics>(
      ops->registry_.get(), store, ops->auth_.get(), options.shard_index,
      std::function<void()>());
  DP_ASSIGN_OR_RETURN(ops->endpoint_,
                      MetricsEndpoint::Start(options.metrics_bind,
                                             options.metrics_port, ops->registry_));
  ops->endpoint_->AddCollectable(ops->metrics_);
  return ops;
}

HostOps::~HostOps() = default;

void HostOps::ConfigureBuilder(grpc::ServerBuilder* builder) {
  if (metrics_ != nullptr) {
    builder->experimental().SetInterceptorCreators(metrics_->Interceptors());
  }
}

int HostOps::metrics_port() const {
  return endpoint_ == nullptr ? -1 : endpoint_->port();
}

void HostOps::OnDeclared() {
  if (on_declared_) on_declared_();
}

void HostOps::OnPush(const PushEvent& event) {
  if (metrics_ != nullptr) metrics_->OnPush(event);
}

void HostOps::OnSharedCall(const char* method, absl::StatusCode code,
                           absl::Duration latency, int64_t received_bytes,
                           int64_t sent_bytes) {
  if (metrics_ != nullptr) {
    metrics_->OnSharedCall(method, code, latency, received_bytes, sent_bytes);
  }
}

}  // namespace downpour
