// File: deploy/run_summary.h
//
// What the launcher learns from its children and what it reports at the end:
// the records parsed from each child's output (ChildReport), the
// accuracy-vs-time curve, the run Summary with its statistics over workers
// and shards, and the lines and files it is printed as (SUMMARY {json},
// "cluster: ..." rate lines, the curve CSV). Pure functions over plain data;
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

// One point of the accuracy-vs-time curve.
struct CurvePoint {
  double seconds = 0;        // Since the workers were started, taken when
                             // the evaluation was started.
  double test_accuracy = 0;
};

// The `seconds` of the first point (in order) whose accuracy is >=
// `threshold`, or -1 if there is none.
double TimeToAccuracy(const std::vector<CurvePoint>& curve, double threshold);

// "curve: t=<T:.1f> s test_accuracy=<A:.4f>".
std::string CurveLine(const CurvePoint& p);

// "seconds,test_accuracy\n" then one "%.3f,%.6g\n" row per point.
std::string CurveCsv(const std::vector<CurvePoint>& curve);

// The result of a successful run; printed as `SUMMARY {json}`.
struct Summary {
  std::string mode;
  int servers = 0;
  int workers = 0;
  int epochs = 0;
  int batch_size = 0;
  std::string optimizer;
  double lr = 0;
  int64_t steps = 0;           // Sum of the workers' DONE "steps".
  int64_t examples = 0;        // Sum of the workers' DONE "examples".
  double wall_seconds = 0;     // First server start to end of evaluation.
  double training_seconds = 0; // Workers started to last worker done.
  double examples_per_sec = 0; // examples / training_seconds.
  double final_loss = 0;       // Mean of the workers' DONE "final_loss".
  double test_accuracy = 0;    // From the EVAL line.
  double test_loss = 0;        // From the EVAL line.
  // From SERVER_STATS lines, when any gave them: mean weighted by each
  // shard's "pushes_applied" (plain mean if a shard lacks it), and max.
  std::optional<double> staleness_mean;
  std::optional<double> staleness_max;
  // Also from SERVER_STATS: p50 combined like the mean (shards see nearly
  // the same pushes, so their medians barely differ), p99 the largest
  // shard's, dropped_stale the sum over shards.
  std::optional<double> staleness_p50;
  std::optional<double> staleness_p99;
  std::optional<int64_t> dropped_stale;
  // Evaluations during training (LaunchOptions::eval_every) in time order,
  // then the final one at training_seconds.
  std::vector<CurvePoint> curve;
  double time_to_85 = -1;      // TimeToAccuracy(curve, 0.85).
  double time_to_88 = -1;      // TimeToAccuracy(curve, 0.88).
  std::string log_dir;         // Where the per-child logs are.

  // {"mode":..,"servers":..,"workers":..,"epochs":..,"batch_size":..,
  //  "optimizer":..,"lr":..,"steps":..,"examples":..,"wall_seconds":..,
  //  "training_seconds":..,"examples_per_sec":..,"final_loss":..,
  //  "test_accuracy":..,"test_loss":..,"time_to_85":..,"time_to_88":..
  //  [,"staleness_mean":..][,"staleness_max":..][,"staleness_p50":..]
  //  [,"staleness_p99":..][,"dropped_stale":..],"log_dir":..}
  // Numbers are rounded to 10 significant digits and integral ones written
  // without a fraction; non-finite ones are null. The curve itself is not in
  // the JSON (see LaunchOptions::curve_csv).
  std::string ToJson() const;
};

// What a finished run gathered, for Summarize.
struct RunRecord {
  std::vector<DoneReport> done;           // One per worker.
  EvalReport eval;                        // The final evaluation.
  // The final evaluation's SERVER_STATS, else whatever the servers printed.
  std::vector<JsonNumbers> server_stats;
  std::vector<CurvePoint> curve;          // Including the final point.
  double wall_seconds = 0;
  double training_seconds = 0;
  std::string log_dir;
};

Summary Summarize(const LaunchOptions& options, const RunRecord& record);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_RUN_SUMMARY_H_
