// File: server/ps_metrics.h
//
// A parameter-server shard's Prometheus metrics (README "Observability"):
//   * per RPC (a gRPC server interceptor, and the service for calls through
//     a worker's shared memory): downpour_rpc_requests_total
//     {method,code}, downpour_rpc_latency_seconds{method} (histogram),
//     downpour_rpc_received_bytes_total / downpour_rpc_sent_bytes_total;
//   * per push (ServiceObserver): downpour_pushes_total{outcome}, the
//     downpour_push_staleness histogram, downpour_push_apply_seconds,
//     downpour_worker_pushes_total{worker} (rate() of it is the per-worker
//     push rate);
//   * read at scrape time: downpour_worker_seconds_since_last_push{worker}
//     (the straggler signal), downpour_rejected_requests_total{reason} (the
//     store's refusals and the token's), downpour_shard_initialized,
//     downpour_snapshots_total{outcome}, downpour_snapshot_age_seconds and
//     downpour_last_snapshot_timestamp_seconds (snapshots).
// Every series carries the label shard="<index>".
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   auto metrics = std::make_unique<ServerMetrics>(registry.get(), 0, ...);
//   service_options.observer = metrics.get();
//   builder.experimental().SetInterceptorCreators(metrics->Interceptors());
//
// Thread-safety: all methods may be called concurrently.
#ifndef DOWNPOUR_SERVER_PS_METRICS_H_
#define DOWNPOUR_SERVER_PS_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/auth_token.h"
#include "server/parameter_store.h"
#include "server/service_observer.h"

namespace downpour {

class ServerMetrics final : public ServiceObserver, public prometheus::Collectable {
 public:
  // `registry`, `store` and `auth` (may be null) are not owned and must
  // outlive this. `on_declared` runs on every successful declaration.
  ServerMetrics(prometheus::Registry* registry, const ParameterStore* store,
                const TokenAuthenticator* auth, int shard_index,
                std::function<void()> on_declared);

  void OnDeclared() override;
  void OnPush(const PushEvent& event) override;
  // Counted in the per-RPC series, under the method's name.
  void OnSharedCall(const char* method, absl::StatusCode code,
                    absl::Duration latency, int64_t received_bytes,
                    int64_t sent_bytes) override;
  // The scrape-time series (register this with the endpoint too).
  std::vector<prometheus::MetricFamily> Collect() const override;

  // A factory list for ServerBuilder::experimental().SetInterceptorCreators.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors();

  // Called by the interceptor.
  void OnRpc(const std::string& method, const char* code, absl::Duration latency,
             int64_t received_bytes, int64_t sent_bytes);

 private:
  // downpour_snapshots_total{outcome}, and once there is one,
  // downpour_last_snapshot_timestamp_seconds and downpour_snapshot_age_seconds.
  void AppendSnapshotFamilies(const ShardStats& stats,
                              std::vector<prometheus::MetricFamily>* out) const;

  const ParameterStore* const store_;      // Not owned.
  const TokenAuthenticator* const auth_;   // Not owned; may be null.
  const std::string shard_;
  const std::function<void()> on_declared_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_;
  prometheus::Family<prometheus::Counter>& rpc_received_;
  prometheus::Family<prometheus::Counter>& rpc_sent_;
  prometheus::Family<prometheus::Counter>& pushes_;
  prometheus::Family<prometheus::Counter>& worker_pushes_;
  prometheus::Histogram& staleness_;
  prometheus::Histogram& apply_seconds_;

  mutable absl::Mutex mu_;
  std::map<int32_t, absl::Time> last_push_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PS_METRICS_H_
