// File: common/metrics_endpoint.h
//
// The Prometheus endpoint of a server or worker process (--metrics_port):
// serves one prometheus::Registry at http://<bind>:<port>/metrics through
// prometheus-cpp's pull library (civetweb inside), not a hand-written HTTP
// server. Metric names are listed in README "Observability".
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   DP_ASSIGN_OR_RETURN(auto endpoint,
//                       MetricsEndpoint::Start("127.0.0.1", 9100, registry));
//   endpoint->port();   // the bound port (port 0 picks a free one)
//
// The endpoint serves only `/metrics` (404 for any other path), with
// kMetricsThreads threads and a kMetricsRequestTimeoutMs wait for a request
// on a connection, so that idle connections cannot hold it for long.
//
// Thread-safety: the library serves scrapes on its own threads; metrics are
// updated concurrently (prometheus-cpp's counters/histograms are atomic).
#ifndef DOWNPOUR_COMMON_METRICS_ENDPOINT_H_
#define DOWNPOUR_COMMON_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus
struct CivetCallbacks;

namespace downpour {

inline constexpr int kMetricsThreads = 8;
inline constexpr int kMetricsRequestTimeoutMs = 2000;

class MetricsEndpoint {
 public:
  // Unavailable "could not serve metrics on <bind>:<port>: <why> (...)"
  // when the port cannot be bound; <why> is the system's reason, e.g.
  // "Address already in use".
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& bind, int port,
      std::shared_ptr<prometheus::Collectable> registry);
  ~MetricsEndpoint();

  int port() const { return port_; }
  // Another source of series read at scrape time (kept alive here).
  void AddCollectable(std::shared_ptr<prometheus::Collectable> c);

 private:
  MetricsEndpoint();
  std::unique_ptr<CivetCallbacks> callbacks_;  // Read by the server below.
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::vector<std::shared_ptr<prometheus::Collectable>> kept_;
  int port_ = 0;
};

// The port a --metrics_port flag asks for: -1 (off) or [0, 65535].
absl::Status CheckMetricsPort(int port);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_METRICS_ENDPOINT_H_
