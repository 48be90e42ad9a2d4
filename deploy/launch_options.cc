#include "deploy/launch_options.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "deploy/fs.h"

namespace downpour {

std::vector<std::string> LaunchOptions::JobGpus() const {
  if (!gpus.empty()) return absl::StrSplit(gpus, ',', absl::SkipEmpty());
  std::vector<std::string> list;
  if (device != "cpu" && host_gpus >= 2) {
    for (int g = 0; g < host_gpus; ++g) list.push_back(absl::StrCat(g));
  }
  return list;
}

int LaunchOptions::GpusPerWorker() const {
  const int n = static_cast<int>(JobGpus().size());
  if (n == 0) return 0;
  if (gpus_per_worker > 0) return gpus_per_worker;
  return std::max(1, n / std::max(1, workers));
}

std::string LaunchOptions::WorkerGpus(int index) const {
  const std::vector<std::string> list = JobGpus();
  const int k = GpusPerWorker();
  std::vector<std::string> mine;
  for (int j = 0; j < k; ++j) {
    mine.push_back(list[(static_cast<size_t>(index) * k + j) % list.size()]);
  }
  return absl::StrJoin(mine, ",");
}

std::string LaunchOptions::SharedGpuNote() const {
  if (device == "cpu" || workers < 2 || gpus_per_worker > 0) return "";
  // Worker processes per GPU ordinal, and every worker's entries in turn.
  std::map<std::string, int> sharing;
  std::vector<std::string> all;
  if (JobGpus().empty()) {
    if (host_gpus < 1) return "";  // No GPU to share (auto: the CPU).
    sharing["0"] = workers;  // One replica each, on GPU 0.
    all.assign(workers, "0");
  } else {
    for (int i = 0; i < workers; ++i) {
      const std::vector<std::string> mine =
          absl::StrSplit(WorkerGpus(i), ',', absl::SkipEmpty());
      for (const std::string& g : std::set<std::string>(mine.begin(), mine.end())) {
        ++sharing[g];
      }
      all.insert(all.end(), mine.begin(), mine.end());
    }
  }
  std::vector<std::string> shared;
  for (const auto& [gpu, processes] : sharing) {
    if (processes >= 2) shared.push_back(gpu);
  }
  if (shared.empty()) return "";
  return absl::StrCat(
      "launch: note: worker processes share GPU ", absl::StrJoin(shared, ", "),
      "; one process with a replica for each entry (--workers=1 --gpus=",
      absl::StrJoin(all, ","), ") ran faster on an H200 (docs/results.md, "
      "GPU). ",
      local_aggregation == "none"
          ? "Each replica still pushes as a worker of its own."
          : "Its replicas' mean gradient goes as one push per step "
            "(--local_aggregation=none: each replica pushes on its own).");
}

int LaunchOptions::ReplicasPerWorker() const {
  const int k = GpusPerWorker();
  return k > 0 ? k : replicas;
}

absl::StatusOr<TrainMode> ParseModeFlag(absl::string_view value) {
  absl::StatusOr<TrainMode> mode = ParseTrainMode(value);
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --mode=", value, "; valid modes: async, sync, ssp, sandblaster"));
  }
  return mode;
}

namespace {

absl::Status AtLeastOne(const char* flag, int64_t v) {
  if (v >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be >= 1, got ", v));
}

// Process counts and devices.
absl::Status ValidateTopology(const LaunchOptions& o) {
  auto at_least_one = AtLeastOne;
  DP_RETURN_IF_ERROR(at_least_one("servers", o.servers));
  DP_RETURN_IF_ERROR(at_least_one("workers", o.workers));
  DP_RETURN_IF_ERROR(at_least_one("epochs", o.epochs));
  DP_RETURN_IF_ERROR(at_least_one("batch_size", o.batch_size));
  DP_RETURN_IF_ERROR(at_least_one("n_fetch", o.n_fetch));
  DP_RETURN_IF_ERROR(at_least_one("n_push", o.n_push));
  DP_RETURN_IF_ERROR(at_least_one("replicas", o.replicas));
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, got '", o.device, "'"));
  }
  if (o.local_aggregation != "sum" && o.local_aggregation != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_aggregation must be sum or none, got '", o.local_aggregation,
        "'"));
  }
  if (!o.gpus.empty() && o.device == "cpu") {
    return absl::InvalidArgumentError("--gpus needs --device=cuda or auto");
  }
  const int listed = static_cast<int>(o.JobGpus().size());
  if (o.gpus_per_worker < 0 || o.gpus_per_worker > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus_per_worker must be in [0, 64] (0: split --gpus evenly), got ",
        o.gpus_per_worker));
  }
  if (o.gpus_per_worker > 0 && listed == 0) {
    return absl::InvalidArgumentError(
        "--gpus_per_worker needs --gpus (this host shows fewer than 2 GPUs)");
  }
  if (!o.gpus.empty() && o.gpus_per_worker == 0 && listed > o.workers &&
      listed % o.workers != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus lists ", listed, " GPUs for --workers=", o.workers,
        " processes, which do not split evenly: give --gpus_per_worker=K "
        "(worker i takes entries i*K to i*K+K-1), or a list of a multiple of ",
        o.workers, " entries"));
  }
  return absl::OkStatus();
}

// The consistency mode's parameters (passed to the servers).
absl::Status ValidateModeOptions(const LaunchOptions& o) {
  if (o.replicas_to_aggregate < 0 || o.replicas_to_aggregate > o.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas_to_aggregate must be in [0, --workers=", o.workers,
        "] (0 = all workers), got ", o.replicas_to_aggregate));
  }
  if (o.min_replicas < 1 || o.min_replicas > o.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_replicas must be in [1, --workers=", o.workers,
                     "], got ", o.min_replicas));
  }
  if (o.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness must be >= 0, got ", o.staleness));
  }
  if (o.staleness_aware && o.mode != TrainMode::kAsync) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness_aware applies to --mode=async, not --mode=",
                     TrainModeName(o.mode)));
  }
  if (o.drop_stale_threshold < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drop_stale_threshold must be >= 0 (0 = off), got ",
                     o.drop_stale_threshold));
  }
  if (!std::isfinite(o.sync_timeout_s) || o.sync_timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync_timeout_s must be a positive number, got ", o.sync_timeout_s));
  }
  return absl::OkStatus();
}

// Training, evaluation and the files the run needs.
absl::Status ValidateRun(const LaunchOptions& o) {
  auto at_least_one = AtLeastOne;
  if (o.eval_every < absl::ZeroDuration() ||
      o.eval_every == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "--eval_every_s must be a finite number >= 0 (0 = off)");
  }
  DP_RETURN_IF_ERROR(at_least_one("eval_examples", o.eval_examples));
  if (o.max_train_examples < 0) {
    return absl::InvalidArgumentError(
        "--max_train_examples must be >= 0 (0 = all)");
  }
  if (!std::isfinite(o.lr) || o.lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be a positive number, got ", o.lr));
  }
  if (o.lr_schedule != "auto" && o.lr_schedule != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr_schedule must be auto or none, got '", o.lr_schedule, "'"));
  }
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--label_smoothing must be in [0, 1), got ", o.label_smoothing));
  }
  if (o.augment != "none" && o.augment != "flip" && o.augment != "crop_flip") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--augment must be none, flip or crop_flip, got '", o.augment, "'"));
  }
  if (o.optimizer.empty()) {
    return absl::InvalidArgumentError("--optimizer must not be empty");
  }
  if (!IsDirectory(o.data_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_dir=", o.data_dir, " is not a directory (fetch the data set "
        "or point --data_dir at it)"));
  }
  if (o.max_restarts < 0 || o.checkpoint_every <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--max_restarts must be >= 0 and --checkpoint_every_s > 0");
  }
  if (o.standby && o.mode == TrainMode::kSandblaster) {
    return absl::InvalidArgumentError(
        "--standby replicates async, sync and ssp jobs; --mode=sandblaster "
        "runs without standbys");
  }
  if (o.startup_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--startup_timeout_s must be > 0");
  }
  // One metrics port per server, worker and standby.
  const int metrics_ports = o.servers * (o.standby ? 2 : 1) + o.workers;
  if (o.metrics_base_port != -1 &&
      (o.metrics_base_port < 1 ||
       o.metrics_base_port + metrics_ports - 1 > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_base_port must be -1 (off) or leave room for ",
        metrics_ports, " ports below 65536, got ", o.metrics_base_port));
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"ps_server_bin",
                                                   o.ps_server_bin},
        std::pair<const char*, const std::string&>{"ps_worker_bin",
                                                   o.ps_worker_bin}}) {
    if (!IsExecutableFile(path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path, " is not an executable file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  DP_RETURN_IF_ERROR(ValidateTopology(o));
  DP_RETURN_IF_ERROR(ValidateModeOptions(o));
  return ValidateRun(o);
}

}  // namespace downpour
