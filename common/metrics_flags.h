// File: common/metrics_flags.h
//
// The Prometheus endpoint flags of ps_server and ps_worker, defined once:
// --metrics_port (-1 off, 0 a free port) and --metrics_bind. The launcher
// gives each child its own port from --metrics_base_port.
#ifndef DOWNPOUR_COMMON_METRICS_FLAGS_H_
#define DOWNPOUR_COMMON_METRICS_FLAGS_H_

#include <string>

namespace downpour {

struct MetricsEndpointFlags {
  int port = -1;  // -1: no endpoint; 0: a free port.
  std::string bind = "127.0.0.1";
};

MetricsEndpointFlags MetricsEndpointFromFlags();

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_METRICS_FLAGS_H_
