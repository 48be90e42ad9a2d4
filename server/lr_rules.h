// File: server/lr_rules.h
//
// The learning-rate rules a server applies by default (--lr_schedule=auto):
// computed from the job's shape, which every process of a job is given
// (common/job_flags.h), so the same job gets the same schedule however it
// was started. A server's schedule counts each chunk's updates
// (server/optimizer.h); the rules size it for the whole job:
//   worker scaling  sync: linear (lr x the k gradients averaged per step,
//                   Goyal et al. 2017); async/ssp: kAsyncScaling;
//   warm-up         kWarmupShare of the job's updates per chunk;
//   decay           cosine to 0 at the job's last update;
//   momentum        async/ssp with adam or momentum: Adam's beta1 or the
//                   momentum coefficient lowered for the momentum asynchrony
//                   itself adds (AsyncMomentum).
// The constants were chosen from 10-epoch measurements (docs/results.md,
// "Learning-rate rules"). A flag given on the command line wins over the
// rule for that value (ApplyLrRules).
//
//   JobShape shape = ...;  // from the job flags and the data set's size
//   LrRules rules = AutoLrRules(shape, "adam");
//   ApplyLrRules(rules, given_flag_names, &options.optimizer);
//
// Pure functions; thread-safe.
#ifndef DOWNPOUR_SERVER_LR_RULES_H_
#define DOWNPOUR_SERVER_LR_RULES_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "common/train_mode.h"
#include "server/optimizer.h"

namespace downpour {

inline constexpr double kWarmupShare = 0.05;
inline constexpr char kDefaultOptimizer[] = "adam";
inline constexpr char kAsyncScaling[] = "none";

// Adam's first-moment decay and the momentum optimizer's coefficient before
// the asynchrony rule below.
inline constexpr double kMomentum = 0.9;

// What the schedule needs to know about the job.
struct JobShape {
  TrainMode mode = TrainMode::kAsync;
  int workers = 1;              // Worker processes.
  int replicas_per_worker = 1;  // Replicas of one process.
  bool local_sum = true;        // Replicas push their mean (else each its own).
  int batch_size = 64;
  int epochs = 1;
  int n_push = 1;
  int64_t train_examples = 1;   // Examples the workers read per epoch, all.

  // Workers the servers see: processes, or replicas with !local_sum.
  int ServerWorkers() const {
    return local_sum ? workers : workers * replicas_per_worker;
  }
};

// Asynchrony begets momentum (Mitliagkas et al. 2016): W workers pushing
// gradients computed on parameters about W - 1 updates old act like an extra
// momentum of 1 - 1/W, so async and ssp servers get an explicit momentum of
// max(0, momentum - (1 - 1/W)) (W = 8: 0.025 for 0.9), keeping the total
// near what one worker has.
double AsyncMomentum(double momentum, int workers);

// The rate for one worker's gradient of batch 64 when --lr is 0 (adam 0.001,
// adagrad 0.05, momentum 0.02, sgd 0.05); the rules scale it for the mode.
double DefaultLearningRate(const std::string& optimizer);

// Updates each chunk of a shard receives over the whole job: one per step in
// sync mode, one per push of every worker in async and ssp modes. The
// longest process reads the largest share of the data split
// (worker/data/dataset_info.h: ceil(n / workers) examples per epoch),
// batch_size x replicas per step, and pushes every n_push steps. >= 1.
int64_t JobUpdatesPerChunk(const JobShape& job);

// The rules' values for one job.
struct LrRules {
  std::string worker_scaling;   // --lr_worker_scaling
  int64_t warmup_updates = 0;   // --lr_warmup_updates
  std::string decay;            // --lr_decay
  int64_t decay_updates = 0;    // --lr_decay_updates
  double min_factor = 0;        // --lr_min_factor
  std::optional<double> adam_beta1;  // --adam_beta1 (async/ssp, adam)
  std::optional<double> momentum;    // --momentum (async/ssp, momentum)
};

LrRules AutoLrRules(const JobShape& job, const std::string& optimizer);

// Writes `rules` into *o (schedule, Adam's beta1 or the momentum) and
// returns the rate scaling to apply, except for each value whose flag (named
// as above, without "--") is in `given`: the command line wins.
std::string ApplyLrRules(const LrRules& rules, const std::set<std::string>& given,
                         OptimizerOptions* o);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_LR_RULES_H_
