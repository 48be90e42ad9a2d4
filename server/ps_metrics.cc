#include "server/ps_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"

namespace downpour {
namespace {

using grpc::experimental::InterceptionHookPoints;

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5, 10};
  return *b;
}

const char* CodeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    default: return "OTHER";
  }
}

// The bulk methods are served as raw byte buffers (server/grpc_service.cc),
// so their received message is a grpc::ByteBuffer; others are not counted
// on the way in.
bool IsRawMethod(const std::string& method) {
  return method == "/downpour.proto.ParameterServer/Pull" ||
         method == "/downpour.proto.ParameterServer/Push" ||
         method == "/downpour.proto.ParameterServer/PushPull";
}

// The `method` label of a call: the method's name for the methods this
// server serves, "other" for any other path a client sends, so that
// made-up names cannot add series.
std::string MethodLabel(const std::string& method) {
  static const auto* known = new std::vector<std::string>{
      "/downpour.proto.ParameterServer/DeclareModel",
      "/downpour.proto.ParameterServer/Pull",
      "/downpour.proto.ParameterServer/Push",
      "/downpour.proto.ParameterServer/PushPull",
      "/downpour.proto.ParameterServer/GetStats",
      "/downpour.proto.JobControl/WorkerDone",
      "/downpour.proto.JobControl/GetJobState",
      "/downpour.proto.JobControl/EndJob",
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
  };
  for (const std::string& k : *known) {
    if (method == k) return k.substr(k.rfind('/') + 1);
  }
  return "other";
}

// Times one call and counts its bytes and status code.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(ServerMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method == nullptr ? "" : method),
        raw_(IsRawMethod(method_)), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (raw_ && m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      auto* b = static_cast<grpc::ByteBuffer*>(m->GetRecvMessage());
      if (b != nullptr) received_ += static_cast<int64_t>(b->Length());
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      const grpc::ByteBuffer* b = m->GetSerializedSendMessage();
      if (b != nullptr) sent_ += static_cast<int64_t>(b->Length());
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->OnRpc(MethodLabel(method_), CodeName(m->GetSendStatus().error_code()),
                      absl::Now() - start_, received_, sent_);
    }
    m->Proceed();
  }

 private:
  ServerMetrics* const metrics_;  // Not owned.
  const std::string method_;
  const bool raw_;
  const absl::Time start_;
  int64_t received_ = 0;
  int64_t sent_ = 0;
};

class RpcInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(ServerMetrics* m) : metrics_(m) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());  // gRPC owns it.
  }

 private:
  ServerMetrics* const metrics_;
};

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

prometheus::ClientMetric Sample(std::vector<prometheus::ClientMetric::Label> labels,
                                double value, bool counter) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (counter) m.counter.value = value; else m.gauge.value = value;
  return m;
}

}  // namespace

ServerMetrics::ServerMetrics(prometheus::Registry* registry,
                             const ParameterStore* store,
                             const TokenAuthenticator* auth, int shard_index,
                             std::function<void()> on_declared)
    : store_(store), auth_(auth), shard_(absl::StrCat(shard_index)),
      on_declared_(std::move(on_declared)),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("downpour_rpc_requests_total")
                        .Help("RPCs served, by method and status code")
                        .Register(*registry)),
      rpc_latency_(prometheus::BuildHistogram()
                       .Name("downpour_rpc_latency_seconds")
                       .Help("Server-side RPC latency, by method")
                       .Register(*registry)),
      rpc_received_(prometheus::BuildCounter()
                        .Name("downpour_rpc_received_bytes_total")
                        .Help("Request bytes of Pull/Push/PushPull, by method")
                        .Register(*registry)),
      rpc_sent_(prometheus::BuildCounter()
                    .Name("downpour_rpc_sent_bytes_total")
                    .Help("Response bytes, by method")
                    .Register(*registry)),
      pushes_(prometheus::BuildCounter()
                  .Name("downpour_pushes_total")
                  .Help("Push parts handled: applied, duplicate (a retry "
                        "already applied) or dropped (too stale)")
                  .Register(*registry)),
      worker_pushes_(prometheus::BuildCounter()
                         .Name("downpour_worker_pushes_total")
                         .Help("Push parts received per worker id")
                         .Register(*registry)),
      staleness_(prometheus::BuildHistogram()
                     .Name("downpour_push_staleness")
                     .Help("Staleness of each applied chunk update (versions)")
                     .Register(*registry)
                     .Add({{"shard", shard_}},
                          prometheus::Histogram::BucketBoundaries{
                              0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64})),
      apply_seconds_(prometheus::BuildHistogram()
                         .Name("downpour_push_apply_seconds")
                         .Help("Time the store took to apply one push part")
                         .Register(*registry)
                         .Add({{"shard", shard_}}, LatencyBuckets())) {}

void ServerMetrics::OnDeclared() {
  if (on_declared_) on_declared_();
}

void ServerMetrics::OnPush(const PushEvent& e) {
  const char* outcome = e.duplicate ? "duplicate" : e.dropped ? "dropped" : "applied";
  pushes_.Add({{"shard", shard_}, {"outcome", outcome}}).Increment();
  worker_pushes_.Add({{"shard", shard_}, {"worker", absl::StrCat(e.worker_id)}})
      .Increment();
  for (int64_t s : e.staleness) staleness_.Observe(static_cast<double>(s));
  apply_seconds_.Observe(absl::ToDoubleSeconds(e.apply_time));
  absl::MutexLock l(&mu_);
  last_push_[e.worker_id] = absl::Now();
}

void ServerMetrics::OnSharedCall(const char* method, absl::StatusCode code,
                                 absl::Duration latency, int64_t received_bytes,
                                 int64_t sent_bytes) {
  OnRpc(method, CodeName(static_cast<grpc::StatusCode>(code)), latency,
        received_bytes, sent_bytes);
}

void ServerMetrics::OnRpc(const std::string& method, const char* code,
                          absl::Duration latency, int64_t received_bytes,
                          int64_t sent_bytes) {
  rpc_requests_.Add({{"shard", shard_}, {"method", method}, {"code", code}})
      .Increment();
  rpc_latency_.Add({{"shard", shard_}, {"method", method}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(latency));
  if (received_bytes > 0) {
    rpc_received_.Add({{"shard", shard_}, {"method", method}})
        .Increment(static_cast<double>(received_bytes));
  }
  rpc_sent_.Add({{"shard", shard_}, {"method", method}})
      .Increment(static_cast<double>(sent_bytes));
}

std::vector<prometheus::MetricFamily> ServerMetrics::Collect() const {
  using prometheus::MetricType;
  auto since = Family("downpour_worker_seconds_since_last_push",
                      "Seconds since each worker's last push reached this "
                      "shard (the straggler signal)", MetricType::Gauge);
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [worker, t] : last_push_) {
      since.metric.push_back(Sample({{"shard", shard_}, {"worker", absl::StrCat(worker)}},
                                    absl::ToDoubleSeconds(now - t), false));
    }
  }
  const ShardStats stats = store_->Stats();
  auto rejected = Family("downpour_rejected_requests_total",
                         "Requests refused, by reason", MetricType::Counter);
  for (const auto& [reason, n] : stats.rejected) {
    rejected.metric.push_back(
        Sample({{"shard", shard_}, {"reason", reason}}, static_cast<double>(n), true));
  }
  if (auth_ != nullptr) {
    rejected.metric.push_back(Sample({{"shard", shard_}, {"reason", "token_missing"}},
                                     static_cast<double>(auth_->refused_missing()), true));
    rejected.metric.push_back(Sample({{"shard", shard_}, {"reason", "token_wrong"}},
                                     static_cast<double>(auth_->refused_wrong()), true));
  }
  auto init = Family("downpour_shard_initialized",
                     "1 once the shard's model is declared", MetricType::Gauge);
  init.metric.push_back(Sample({{"shard", shard_}}, stats.initialized ? 1 : 0, false));
  std::vector<prometheus::MetricFamily> out = {std::move(since), std::move(rejected),
                                               std::move(init)};
  AppendSnapshotFamilies(stats, &out);
  return out;
}

void ServerMetrics::AppendSnapshotFamilies(
    const ShardStats& stats, std::vector<prometheus::MetricFamily>* out) const {
  using prometheus::MetricType;
  auto snapshots = Family("downpour_snapshots_total",
                          "Shard snapshot writes by this process, by outcome "
                          "(written, failed)", MetricType::Counter);
  snapshots.metric.push_back(Sample({{"shard", shard_}, {"outcome", "written"}},
                                    static_cast<double>(stats.snapshots_written), true));
  snapshots.metric.push_back(Sample({{"shard", shard_}, {"outcome", "failed"}},
                                    static_cast<double>(stats.snapshots_failed), true));
  out->push_back(std::move(snapshots));
  // No sample until there is a snapshot to fall back to: an absent series
  // reads as "none", where a 0 would read as "just written".
  if (stats.last_snapshot_unix_s <= 0) return;
  auto when = Family("downpour_last_snapshot_timestamp_seconds",
                     "Unix time the snapshot this shard would restore from "
                     "was written", MetricType::Gauge);
  when.metric.push_back(Sample({{"shard", shard_}},
                               static_cast<double>(stats.last_snapshot_unix_s), false));
  auto age = Family("downpour_snapshot_age_seconds",
                    "Seconds since that snapshot was written: the updates a "
                    "crash of this shard now would lose", MetricType::Gauge);
  age.metric.push_back(Sample(
      {{"shard", shard_}},
      absl::ToDoubleSeconds(absl::Now() - absl::FromUnixSeconds(stats.last_snapshot_unix_s)),
      false));
  out->push_back(std::move(when));
  out->push_back(std::move(age));
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerMetrics::Interceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<RpcInterceptorFactory>(this));
  return v;
}

}  // namespace downpour
