// File: worker/worker_metrics.h
//
// A worker process's Prometheus metrics (--metrics_port; README
// "Observability"), fed from the progress reports of the Downpour loop
// (worker/step_timing.h), one set of series per worker id:
//   * downpour_worker_step_seconds_total{worker,phase}: time spent waiting
//     for data, computing, pulling and pushing (the step split);
//   * downpour_worker_steps_total{worker}, downpour_worker_examples_total
//     {worker}: progress; rate() of the latter is examples/sec;
//   * downpour_worker_examples_per_second{worker}, downpour_worker_loss
//     {worker}, downpour_worker_batch_seconds{worker}: the last window's;
//   * downpour_worker_bottleneck{worker,verdict}: 1 for the verdict of the
//     last window (input-bound, communication-bound, compute-bound), else 0.
//
//   DP_ASSIGN_OR_RETURN(auto metrics, WorkerMetrics::Start("127.0.0.1", 0));
//   on_progress = [&](const Progress& p) { metrics->OnProgress(w, p); ... };
//   metrics->port();   // the bound port
//
// Thread-safety: OnProgress may be called from several threads (independent
// replicas) while the endpoint serves scrapes.
#ifndef DOWNPOUR_WORKER_WORKER_METRICS_H_
#define DOWNPOUR_WORKER_WORKER_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "worker/step_timing.h"

namespace downpour {

class MetricsEndpoint;

class WorkerMetrics {
 public:
  // Serves the metrics at http://<bind>:<port>/metrics (port 0: a free
  // one). InvalidArgument for a bad port; Unavailable when it cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(
      const std::string& bind, int port);
  // Metrics without an endpoint (tests read registry()).
  WorkerMetrics();
  ~WorkerMetrics();

  // Adds one progress window of worker `worker`.
  void OnProgress(int worker, const Progress& p) ABSL_LOCKS_EXCLUDED(mu_);

  int port() const;
  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& phase_seconds_;
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& examples_;
  prometheus::Family<prometheus::Gauge>& examples_per_sec_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& batch_seconds_;
  prometheus::Family<prometheus::Gauge>& bottleneck_;
  std::unique_ptr<MetricsEndpoint> endpoint_;

  absl::Mutex mu_;
  std::map<int, int64_t> last_step_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_WORKER_METRICS_H_
