#include "common/metrics_endpoint.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace downpour {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& bind, int port,
    std::shared_ptr<prometheus::Collectable> registry) {
  if (absl::Status s = CheckMetricsPort(port); !s.ok() || port < 0) {
    return s.ok() ? absl::InvalidArgumentError("metrics endpoint is off") : s;
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  const std::string address = absl::StrCat(bind, ":", port);
  try {
    // One listening thread; scrapes are rare and small.
    e->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat(
        "could not serve metrics on ", address, ": ", ex.what()));
  }
  e->AddCollectable(std::move(registry));
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? port : ports[0];
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::AddCollectable(std::shared_ptr<prometheus::Collectable> c) {
  exposer_->RegisterCollectable(c);
  kept_.push_back(std::move(c));
}

absl::Status CheckMetricsPort(int port) {
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port must be -1 (off) or in [0, 65535], got ", port));
  }
  return absl::OkStatus();
}

}  // namespace downpour
