#include "worker/worker_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics_endpoint.h"
#include "common/status_macros.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace downpour {
namespace {

template <typename Builder>
auto& Make(Builder builder, prometheus::Registry* r, const char* name,
           const char* help) {
  return builder.Name(name).Help(help).Register(*r);
}

}  // namespace

WorkerMetrics::WorkerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      phase_seconds_(Make(prometheus::BuildCounter(), registry_.get(),
                          "downpour_worker_step_seconds_total",
                          "Seconds of the worker's steps spent per phase "
                          "(data, compute, pull, push).")),
      steps_(Make(prometheus::BuildCounter(), registry_.get(),
                  "downpour_worker_steps_total", "Training steps completed.")),
      examples_(Make(prometheus::BuildCounter(), registry_.get(),
                     "downpour_worker_examples_total",
                     "Training examples processed; rate() is examples/sec.")),
      examples_per_sec_(Make(prometheus::BuildGauge(), registry_.get(),
                             "downpour_worker_examples_per_second",
                             "Examples/sec over the last progress window.")),
      loss_(Make(prometheus::BuildGauge(), registry_.get(), "downpour_worker_loss",
                 "Mean training loss over the last progress window.")),
      batch_seconds_(Make(prometheus::BuildGauge(), registry_.get(),
                          "downpour_worker_batch_seconds",
                          "Seconds per batch over the last progress window.")),
      bottleneck_(Make(prometheus::BuildGauge(), registry_.get(),
                       "downpour_worker_bottleneck",
                       "1 for the last window's verdict (input-bound, "
                       "communication-bound, compute-bound), else 0.")) {}

WorkerMetrics::~WorkerMetrics() = default;

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(
    const std::string& bind, int port) {
  DP_RETURN_IF_ERROR(CheckMetricsPort(port));
  auto m = std::make_unique<WorkerMetrics>();
  DP_ASSIGN_OR_RETURN(m->endpoint_, MetricsEndpoint::Start(bind, port, m->registry_));
  return m;
}

int WorkerMetrics::port() const {
  return endpoint_ == nullptr ? -1 : endpoint_->port();
}

void WorkerMetrics::OnProgress(int worker, const Progress& p) {
  const std::string w = absl::StrCat(worker);
  int64_t steps = 0;
  {
    absl::MutexLock l(&mu_);
    int64_t& last = last_step_[worker];
    steps = p.step - last;
    last = p.step;
  }
  const std::pair<const char*, double> phases[] = {
      {"data", p.window.data},
      {"compute", p.window.compute},
      {"pull", p.window.pull},
      {"push", p.window.push}};
  for (const auto& [phase, seconds] : phases) {
    phase_seconds_.Add({{"worker", w}, {"phase", phase}}).Increment(seconds);
  }
  if (steps > 0) steps_.Add({{"worker", w}}).Increment(static_cast<double>(steps));
  examples_.Add({{"worker", w}}).Increment(static_cast<double>(p.window_examples));
  examples_per_sec_.Add({{"worker", w}}).Set(p.examples_per_sec);
  loss_.Add({{"worker", w}}).Set(p.loss);
  batch_seconds_.Add({{"worker", w}}).Set(p.sec_per_batch);
  const std::string verdict = p.window.Verdict();
  for (const char* v : {"input-bound", "communication-bound", "compute-bound"}) {
    bottleneck_.Add({{"worker", w}, {"verdict", v}}).Set(verdict == v ? 1 : 0);
  }
}

}  // namespace downpour
