#include "server/lr_rules.h"

#include <algorithm>
#include <cmath>

#include "worker/data/dataset_info.h"

namespace downpour {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

double DefaultLearningRate(const std::string& optimizer) {
  if (optimizer == "adam") return 0.001;
  if (optimizer == "momentum") return 0.02;
  return 0.05;  // adagrad, sgd, and anything the store will refuse.
}

double AsyncMomentum(double momentum, int workers) {
  const double implicit = 1.0 - 1.0 / std::max(1, workers);
  return std::max(0.0, momentum - implicit);
}

int64_t JobUpdatesPerChunk(const JobShape& job) {
  const int64_t workers = std::max(1, job.workers);
  const int64_t per_step = std::max<int64_t>(
      1, int64_t{job.batch_size} * std::max(1, job.replicas_per_worker));
  // The largest share of the data split (worker/data/dataset_info.h):
  // shard 0's, ceil(n / workers).
  const int64_t share = ExamplesInShard(
      std::max<int64_t>(1, job.train_examples),
      DataShard{0, static_cast<int>(workers)});
  const int64_t steps = std::max(1, job.epochs) * CeilDiv(share, per_step);
  const int64_t pushes = CeilDiv(steps, std::max(1, job.n_push));
  if (job.mode == TrainMode::kSync) return pushes;
  return pushes * std::max(1, job.ServerWorkers());
}

LrRules AutoLrRules(const JobShape& job, const std::string& optimizer) {
  LrRules r;
  const int64_t updates = JobUpdatesPerChunk(job);
  r.worker_scaling = job.mode == TrainMode::kSync ? "linear" : kAsyncScaling;
  // At least one warm-up update, and fewer than the job has (none for a
  // job of one update), which the cosine decay needs.
  r.warmup_updates = std::min<int64_t>(
      std::max<int64_t>(
          1, static_cast<int64_t>(std::floor(updates * kWarmupShare))),
      std::max<int64_t>(0, updates - 1));
  r.decay = "cosine";
  r.decay_updates = updates;
  r.min_factor = 0;
  if (job.mode != TrainMode::kSync) {
    const double m = AsyncMomentum(kMomentum, job.ServerWorkers());
    if (optimizer == "adam") r.adam_beta1 = m;
    if (optimizer == "momentum") r.momentum = m;
  }
  return r;
}

std::string ApplyLrRules(const LrRules& rules, const std::set<std::string>& given,
                         OptimizerOptions* o) {
  auto free = [&given](const char* flag) { return given.count(flag) == 0; };
  if (free("lr_warmup_updates")) o->schedule.warmup_updates = rules.warmup_updates;
  if (free("lr_decay")) o->schedule.decay = rules.decay;
  if (free("lr_decay_updates")) o->schedule.decay_updates = rules.decay_updates;
  if (free("lr_min_factor")) {
    o->schedule.min_factor = static_cast<float>(rules.min_factor);
  }
  if (rules.adam_beta1.has_value() && free("adam_beta1")) {
    o->adam_beta1 = static_cast<float>(*rules.adam_beta1);
  }
  if (rules.momentum.has_value() && free("momentum")) {
    o->momentum = static_cast<float>(*rules.momentum);
  }
  return rules.worker_scaling;
}

}  // namespace downpour
