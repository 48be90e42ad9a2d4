// File: common/run_summary.h
//
// The result of a training run as every entry point reports it: the
// accuracy-vs-time curve, the Summary with its statistics over workers and
// shards, and the lines and files it is printed as (SUMMARY {json}, the
// curve CSV). The launcher (deploy/launcher.h) and the chief of a job from a
// cluster spec (worker/job_end.h) both build it with Summarize. Pure
// functions over plain data; thread-compatible.
//
//   Summary s = Summarize(SummaryJob{...}, record);
//   std::cout << "SUMMARY " << s.ToJson() << "\n";
#ifndef DOWNPOUR_COMMON_RUN_SUMMARY_H_
#define DOWNPOUR_COMMON_RUN_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/train_mode.h"

namespace downpour {

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
  // The servers' optimizer and learning rate; for --mode=sandblaster
  // "lbfgs" and no lr (L-BFGS sizes its steps by line search).
  std::string optimizer;
  std::optional<double> lr;
  int64_t steps = 0;           // Sum of the workers' DONE "steps".
  int64_t examples = 0;        // Sum of the workers' DONE "examples".
  double wall_seconds = 0;     // First server start to end of evaluation.
  double training_seconds = 0; // Workers started to last worker done.
  double examples_per_sec = 0; // examples / training_seconds.
  double final_loss = 0;       // Mean of the workers' DONE "final_loss".
  double test_accuracy = 0;    // From the EVAL line.
  double test_loss = 0;        // From the EVAL line.
  int64_t bad_images = 0;      // Sum of the workers' DONE "bad_images".
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
  // --mode=sandblaster, from the chief's DONE line: L-BFGS iterations and
  // the evaluations spent in line searches (final_loss is then the chief's
  // last objective value); used and lost (backup) portions summed over the
  // workers.
  std::optional<int64_t> iterations;
  std::optional<int64_t> line_search_evaluations;
  std::optional<int64_t> portions;
  std::optional<int64_t> backup_portions;
  // Evaluations during training (the launcher's --eval_every_s) in time order,
  // then the final one at training_seconds.
  std::vector<CurvePoint> curve;
  // TimeToAccuracy(curve, 0.85 / 0.88) when the curve was sampled during
  // training (more than the final point); absent otherwise.
  std::optional<double> time_to_85;
  std::optional<double> time_to_88;
  std::string log_dir;         // Where the per-child logs are; "" when
                               // they were removed.
  std::string saved_params;    // Where the parameters were saved; "" for
                               // nowhere.

  // {"mode":..,"servers":..,"workers":..,"epochs":..,"batch_size":..,
  //  "optimizer":..,"lr":..,"steps":..,"examples":..,"wall_seconds":..,
  //  "training_seconds":..,"examples_per_sec":..,"final_loss":..,
  //  "test_accuracy":..,"test_loss":..,"bad_images":..
  //  [,"time_to_85":..,"time_to_88":..]
  //  [,"staleness_mean":..][,"staleness_max":..][,"staleness_p50":..]
  //  [,"staleness_p99":..][,"dropped_stale":..][,"iterations":..]
  //  [,"line_search_evaluations":..][,"portions":..]
  //  [,"backup_portions":..][,"log_dir":..]
  //  [,"saved_params":..]}
  // Numbers are rounded to 10 significant digits and integral ones written
  // without a fraction; non-finite ones are null. The curve itself is not in
  // the JSON (the launcher writes it with --curve_csv).
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

// The job a Summary describes.
struct SummaryJob {
  TrainMode mode = TrainMode::kAsync;
  int servers = 0;
  int workers = 0;
  int epochs = 0;
  int batch_size = 0;
  std::string optimizer;
  double lr = 0;
};

Summary Summarize(const SummaryJob& job, const RunRecord& record);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_RUN_SUMMARY_H_
