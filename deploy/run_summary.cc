#include "deploy/run_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace downpour {

void RecordChildLine(TaskRole role, const std::string& line,
                     ChildReport* report) {
  switch (role) {
    case TaskRole::kWorker:
      if (auto p = ParseProgressLine(line)) {
        report->latest = *p;
      } else if (auto d = ParseDoneLine(line)) {
        report->done = std::move(*d);
      }
      break;
    case TaskRole::kEval:
    case TaskRole::kCurveEval:
      if (auto e = ParseEvalLine(line)) {
        report->eval = *e;
      } else if (auto s = ParseServerStatsLine(line)) {
        report->server_stats.push_back(std::move(*s));
      }
      break;
    case TaskRole::kServer:
      if (auto s = ParseServerStatsLine(line)) {
        report->server_stats.push_back(std::move(*s));
      }
      break;
  }
}

std::optional<std::string> ClusterRateLine(
    const std::vector<WorkerProgress>& latest) {
  if (latest.empty()) return std::nullopt;
  double rate = 0;
  int64_t step = 0;
  for (const WorkerProgress& p : latest) {
    rate += p.examples_per_sec;
    step = std::max(step, p.step);
  }
  return absl::StrFormat("cluster: %.1f examples/sec (%d workers, step %d)",
                         rate, latest.size(), step);
}

Summary Summarize(const LaunchOptions& options, const RunRecord& record) {
  SummaryJob job;
  job.mode = options.mode;
  job.servers = options.servers;
  job.workers = options.workers;
  job.epochs = options.epochs;
  job.batch_size = options.batch_size;
  job.optimizer = options.optimizer;
  job.lr = options.lr;
  return Summarize(job, record);
}

}  // namespace downpour
