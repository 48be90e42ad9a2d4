#include "common/run_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

// The mean of `key` over the shards that report it, weighted by each shard's
// "pushes_applied" (a plain mean if any of them lacks it); nullopt if none
// reports it.
std::optional<double> WeightedMeanOverShards(
    const std::vector<JsonNumbers>& stats, const std::string& key) {
  double weighted = 0, weight = 0, plain = 0;
  int plain_n = 0;
  bool all_weighted = true;
  for (const JsonNumbers& st : stats) {
    auto it = st.find(key);
    if (it == st.end()) continue;
    plain += it->second;
    ++plain_n;
    if (auto w = st.find("pushes_applied"); w != st.end()) {
      weighted += it->second * w->second;
      weight += w->second;
    } else {
      all_weighted = false;
    }
  }
  if (plain_n == 0) return std::nullopt;
  if (all_weighted && weight > 0) return weighted / weight;
  return plain / plain_n;
}

std::optional<double> MaxOverShards(const std::vector<JsonNumbers>& stats,
                                    const std::string& key) {
  std::optional<double> max;
  for (const JsonNumbers& st : stats) {
    if (auto it = st.find(key); it != st.end()) {
      max = std::max(max.value_or(it->second), it->second);
    }
  }
  return max;
}

// `v` as the SUMMARY writes numbers: 10 significant digits, integral values
// as integers, non-finite as null.
nlohmann::ordered_json Number(double v) {
  if (!std::isfinite(v)) return nullptr;
  const double rounded =
      std::strtod(absl::StrFormat("%.10g", v).c_str(), nullptr);
  if (rounded == std::floor(rounded) && std::fabs(rounded) < 1e15) {
    return static_cast<int64_t>(rounded);
  }
  return rounded;
}

}  // namespace

double TimeToAccuracy(const std::vector<CurvePoint>& curve,
                      double threshold) {
  for (const CurvePoint& p : curve) {
    if (p.test_accuracy >= threshold) return p.seconds;
  }
  return -1;
}

std::string CurveLine(const CurvePoint& p) {
  return absl::StrFormat("curve: t=%.1f s test_accuracy=%.4f", p.seconds,
                         p.test_accuracy);
}

std::string CurveCsv(const std::vector<CurvePoint>& curve) {
  std::string csv = "seconds,test_accuracy\n";
  for (const CurvePoint& p : curve) {
    absl::StrAppendFormat(&csv, "%.3f,%.6g\n", p.seconds, p.test_accuracy);
  }
  return csv;
}

std::string Summary::ToJson() const {
  nlohmann::ordered_json j;
  j["mode"] = mode;
  j["servers"] = servers;
  j["workers"] = workers;
  j["epochs"] = epochs;
  j["batch_size"] = batch_size;
  j["optimizer"] = optimizer;
  if (lr) j["lr"] = Number(*lr);
  j["steps"] = steps;
  j["examples"] = examples;
  j["wall_seconds"] = Number(wall_seconds);
  j["training_seconds"] = Number(training_seconds);
  j["examples_per_sec"] = Number(examples_per_sec);
  j["final_loss"] = Number(final_loss);
  j["test_accuracy"] = Number(test_accuracy);
  j["test_loss"] = Number(test_loss);
  j["bad_images"] = bad_images;
  if (time_to_85) j["time_to_85"] = Number(*time_to_85);
  if (time_to_88) j["time_to_88"] = Number(*time_to_88);
  if (staleness_mean) j["staleness_mean"] = Number(*staleness_mean);
  if (staleness_max) j["staleness_max"] = Number(*staleness_max);
  if (staleness_p50) j["staleness_p50"] = Number(*staleness_p50);
  if (staleness_p99) j["staleness_p99"] = Number(*staleness_p99);
  if (dropped_stale) j["dropped_stale"] = *dropped_stale;
  if (iterations) j["iterations"] = *iterations;
  if (line_search_evaluations) {
    j["line_search_evaluations"] = *line_search_evaluations;
  }
  if (portions) j["portions"] = *portions;
  if (backup_portions) j["backup_portions"] = *backup_portions;
  if (!log_dir.empty()) j["log_dir"] = log_dir;
  if (!saved_params.empty()) j["saved_params"] = saved_params;
  return j.dump(-1, ' ', false,
                nlohmann::ordered_json::error_handler_t::replace);
}

Summary Summarize(const SummaryJob& options, const RunRecord& record) {
  Summary s;
  s.mode = TrainModeName(options.mode);
  s.servers = options.servers;
  s.workers = options.workers;
  s.epochs = options.epochs;
  s.batch_size = options.batch_size;
  if (options.mode == TrainMode::kSandblaster) {
    s.optimizer = "lbfgs";
  } else {
    s.optimizer = options.optimizer;
    s.lr = options.lr;
  }
  double loss_sum = 0;
  for (const DoneReport& d : record.done) {
    s.steps += d.steps;
    s.examples += d.examples;
    s.bad_images += d.bad_images;
    loss_sum += d.final_loss;
  }
  s.final_loss = record.done.empty() ? NAN : loss_sum / record.done.size();
  for (const DoneReport& d : record.done) {
    if (d.iterations >= 0) {  // The Sandblaster chief.
      s.iterations = d.iterations;
      s.line_search_evaluations = std::max<int64_t>(0, d.line_search_evaluations);
      s.final_loss = d.final_loss;
    }
    if (d.portions >= 0) s.portions = s.portions.value_or(0) + d.portions;
    if (d.backup_portions >= 0) {
      s.backup_portions = s.backup_portions.value_or(0) + d.backup_portions;
    }
  }
  s.wall_seconds = record.wall_seconds;
  s.training_seconds = record.training_seconds;
  s.examples_per_sec =
      s.training_seconds > 0 ? s.examples / s.training_seconds : 0;
  s.test_accuracy = record.eval.test_accuracy;
  s.test_loss = record.eval.test_loss;
  s.curve = record.curve;
  if (s.curve.size() > 1) {  // Sampled during training, not only the end.
    s.time_to_85 = TimeToAccuracy(s.curve, 0.85);
    s.time_to_88 = TimeToAccuracy(s.curve, 0.88);
  }
  const std::vector<JsonNumbers>& stats = record.server_stats;
  s.staleness_mean = WeightedMeanOverShards(stats, "staleness_mean");
  s.staleness_p50 = WeightedMeanOverShards(stats, "staleness_p50");
  s.staleness_max = MaxOverShards(stats, "staleness_max");
  s.staleness_p99 = MaxOverShards(stats, "staleness_p99");
  for (const JsonNumbers& st : stats) {
    if (auto it = st.find("dropped_stale"); it != st.end()) {
      s.dropped_stale = s.dropped_stale.value_or(0) +
                        static_cast<int64_t>(std::llround(it->second));
    }
  }
  s.log_dir = record.log_dir;
  return s;
}

}  // namespace downpour
