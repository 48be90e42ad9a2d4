#include "deploy/lr_rules.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/data/file_reading.h"

namespace downpour {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

double DefaultLearningRate(const std::string& optimizer) {
  if (optimizer == "adam") return 0.001;
  if (optimizer == "momentum") return 0.02;
  return 0.05;  // adagrad, sgd, and anything the servers will refuse.
}

double AsyncMomentum(double momentum, int workers) {
  const double implicit = 1.0 - 1.0 / std::max(1, workers);
  return std::max(0.0, momentum - implicit);
}

int64_t JobUpdatesPerChunk(const LaunchOptions& o, int64_t train_examples) {
  const int64_t workers = std::max(1, o.workers);
  const int64_t per_step =
      std::max<int64_t>(1, int64_t{o.batch_size} * o.ReplicasPerWorker());
  const int64_t share = CeilDiv(std::max<int64_t>(1, train_examples), workers);
  const int64_t steps = std::max(1, o.epochs) * CeilDiv(share, per_step);
  const int64_t pushes = CeilDiv(steps, std::max(1, o.n_push));
  if (o.mode == TrainMode::kSync) return pushes;
  return pushes * std::max(1, o.ServerWorkers());
}

std::vector<std::string> LrRuleArgs(const LaunchOptions& o,
                                    int64_t train_examples) {
  if (o.lr_schedule == "none") return {};
  const int64_t updates = JobUpdatesPerChunk(o, train_examples);
  const int64_t warmup = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(updates * kWarmupShare)));
  std::vector<std::string> args = {
      absl::StrCat("--lr_worker_scaling=",
                   o.mode == TrainMode::kSync ? "linear" : kAsyncScaling),
      absl::StrCat("--lr_warmup_updates=", warmup),
      "--lr_decay=cosine",
      absl::StrCat("--lr_decay_updates=", updates),
      "--lr_min_factor=0",
  };
  if (o.mode != TrainMode::kSync) {
    const double m = AsyncMomentum(kMomentum, o.ServerWorkers());
    if (o.optimizer == "adam") args.push_back(absl::StrCat("--adam_beta1=", m));
    if (o.optimizer == "momentum") {
      args.push_back(absl::StrCat("--momentum=", m));
    }
  }
  return args;
}

absl::StatusOr<int64_t> CountTrainingExamples(const std::string& data_dir,
                                              int64_t max_train_examples) {
  std::string path = data_dir + "/train-labels-idx1-ubyte.gz";
  if (!data_internal::FileExists(path)) {
    path = data_dir + "/train-labels-idx1-ubyte";
  }
  absl::StatusOr<std::string> bytes = data_internal::ReadMaybeGzip(path);
  if (!bytes.ok()) return bytes.status();
  const std::string& b = *bytes;
  if (b.size() < 8 || b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != 1) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an IDX label file (bad header)"));
  }
  int64_t n = 0;
  for (int i = 4; i < 8; ++i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  if (max_train_examples > 0) n = std::min(n, max_train_examples);
  return n;
}

}  // namespace downpour
