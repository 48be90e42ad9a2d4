// File: common/report.h
//
// The one definition of the lines ps_worker prints for the launcher (and for
// people reading the log), and of how they are read back. Each line is
// formatted and parsed here, so worker/ and deploy/ cannot drift apart:
//
//   worker 1: step 120, loss = 0.412 (3150.2 examples/sec; 0.020 sec/batch) [...]
//   DONE {"worker":1,"steps":940,"examples":60000,"pushes":940,
//         "final_loss":0.31000,"seconds":55.200,...,"verdict":"..."}
//   EVAL {"test_accuracy":0.88430,"test_loss":0.33000,"examples":10000}
//   SERVER_STATS {"shard":0,"staleness_mean":1.2000,"staleness_max":7,...}
//
// Writer side (worker/ps_worker_main.cc):
//   std::printf("%s\n", FormatDoneLine(done).c_str());
// Reader side (deploy/):
//   if (std::optional<DoneReport> d = ParseDoneLine(line)) steps += d->steps;
//
// JSON goes through nlohmann/json. All functions are pure and thread-safe.
#ifndef DOWNPOUR_COMMON_REPORT_H_
#define DOWNPOUR_COMMON_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/shard_stats.h"

namespace downpour {

// The numeric members of a JSON object's top level, by key. Members whose
// value is a string, bool, null, array or object are left out.
using JsonNumbers = std::map<std::string, double>;

// Parses one JSON object and returns its top-level numeric members.
// InvalidArgument ("malformed JSON: ...") for malformed JSON or a value that
// is not an object.
absl::StatusOr<JsonNumbers> ParseJsonNumbers(absl::string_view json);

// If `line` is `<tag> {json}` (the tag at the start of the line after
// optional leading spaces, then one space), the object's numeric members;
// nullopt for other lines or malformed JSON. Also reads the launcher's
// "SUMMARY {json}" line.
std::optional<JsonNumbers> ParseTaggedJson(absl::string_view line,
                                           absl::string_view tag);

// One progress line of a training worker.
struct WorkerProgress {
  int worker = 0;
  int64_t step = 0;
  double loss = 0;
  double examples_per_sec = 0;
  double sec_per_batch = 0;
  std::string shares;  // The time breakdown, e.g. "[data 1% compute 80% ...]".
};

// "worker <I>: step <N>, loss = <L:.3f> (<R:.1f> examples/sec; <S:.3f>
// sec/batch) <shares>".
std::string FormatProgressLine(const WorkerProgress& p);

// Parses a progress line. Only worker, step, loss and examples_per_sec are
// read; anything after "examples/sec" is ignored. A loss that is not a
// number ("nan", "inf") reads as NaN. nullopt for any other line.
std::optional<WorkerProgress> ParseProgressLine(absl::string_view line);

// What a training worker process prints when it has finished.
struct DoneReport {
  int worker = 0;
  int64_t steps = 0;
  int64_t examples = 0;
  int64_t pushes = 0;
  double final_loss = 0;
  double seconds = 0;
  // Seconds spent per part of a step (worker/trainer.h's StepTimes).
  double time_data = 0;
  double time_compute = 0;
  double time_pull = 0;
  double time_push = 0;
  std::string verdict;
  // Corrupt or unreadable images skipped (--skip_bad_images).
  int64_t bad_images = 0;
  // --mode=sandblaster only (-1 otherwise, and left out of the line): work
  // portions whose result was used, and duplicates (backup tasks) that lost
  // the race; the chief adds the L-BFGS iterations and the evaluations
  // spent in line searches.
  int64_t portions = -1;
  int64_t backup_portions = -1;
  int64_t iterations = -1;
  int64_t line_search_evaluations = -1;
};

// "DONE {json}" with every member above (final_loss %.5f, seconds and times
// %.3f, then bad_images, then the Sandblaster members that are set).
std::string FormatDoneLine(const DoneReport& d);

// Parses a DONE line. worker, steps, examples, final_loss and seconds must be
// numbers; the other members keep their defaults when missing. nullopt for
// other lines.
std::optional<DoneReport> ParseDoneLine(absl::string_view line);

// What an evaluation process prints.
struct EvalReport {
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t examples = 0;
};

// "EVAL {"test_accuracy":%.5f,"test_loss":%.5f,"examples":N}".
std::string FormatEvalLine(const EvalReport& e);

// Parses an EVAL line; test_accuracy and test_loss must be numbers, examples
// is 0 when missing. nullopt for other lines.
std::optional<EvalReport> ParseEvalLine(absl::string_view line);

// "SERVER_STATS " + ShardStatsToJson(s).
std::string FormatServerStatsLine(const ShardStats& s);

// The numeric members of a SERVER_STATS line (ShardStatsToJson's keys, e.g.
// "shard", "pushes_applied", "staleness_mean"); nullopt for other lines.
std::optional<JsonNumbers> ParseServerStatsLine(absl::string_view line);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_REPORT_H_
