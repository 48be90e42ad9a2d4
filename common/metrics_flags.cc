#include "common/metrics_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, metrics_port, downpour::MetricsEndpointFlags{}.port,
          "Prometheus endpoint port (/metrics); -1 off, 0 a free one.");
ABSL_FLAG(std::string, metrics_bind, downpour::MetricsEndpointFlags{}.bind,
          "Address of the Prometheus endpoint.");

namespace downpour {

MetricsEndpointFlags MetricsEndpointFromFlags() {
  MetricsEndpointFlags m;
  m.port = absl::GetFlag(FLAGS_metrics_port);
  m.bind = absl::GetFlag(FLAGS_metrics_bind);
  return m;
}

}  // namespace downpour
