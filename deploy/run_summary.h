// File: deploy/run_summary.h
//
// What the launcher learns from its children: the records parsed from each
// child's output (ChildReport) and the "cluster: ..." rate lines; the run
// Summary itself is common/run_summary.h. Pure functions over plain data;
// thread-compatible.
//
//   ChildReport r;
//   RecordChildLine(TaskRole::kWorker, line, &r);     // for each line
//   Summary s = Summarize(options, record);
//   out << "SUMMARY " << s.ToJson() << "\n";
#ifndef DOWNPOUR_DEPLOY_RUN_SUMMARY_H_
#define DOWNPOUR_DEPLOY_RUN_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/run_summary.h"
#include "deploy/cluster_plan.h"
#include "deploy/launch_options.h"

namespace downpour {

// What one child printed that the launcher uses.
struct ChildReport {
  std::optional<WorkerProgress> latest;   // Workers: last progress line.
  std::optional<DoneReport> done;         // Workers: the DONE line.
  std::optional<EvalReport> eval;         // Evaluations: the EVAL line.
  std::vector<JsonNumbers> server_stats;  // SERVER_STATS lines (servers and
                                          // evaluations).
};

// Parses `line` of a child with `role` into *report.
void RecordChildLine(TaskRole role, const std::string& line,
                     ChildReport* report);

// "cluster: <R> examples/sec (<n> workers, step <s>)" over the latest
// progress of the still-running workers; nullopt when there is none.
std::optional<std::string> ClusterRateLine(
    const std::vector<WorkerProgress>& latest);

// The launcher's job as a SummaryJob, summarized.
Summary Summarize(const LaunchOptions& options, const RunRecord& record);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_RUN_SUMMARY_H_
