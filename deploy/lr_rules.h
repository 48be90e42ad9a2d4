// File: deploy/lr_rules.h
//
// Compute and learning (issue 18): the learning-rate rules the launcher gives
// its servers by default (--lr_schedule=auto). A server's schedule counts each
// chunk's updates (server/optimizer.h); only the launcher knows how many a
// job will make, so it computes the horizon from the data size, the epochs,
// the batch and the workers, and passes:
//   --lr_worker_scaling   sync: linear (lr x the k gradients averaged per
//                         step, Goyal et al. 2017); async/ssp: kAsyncScaling;
//   --lr_warmup_updates   kWarmupShare of the job's updates per chunk;
//   --lr_decay=cosine --lr_decay_updates=<the job's updates per chunk>
//   --lr_min_factor=0     (the rate reaches 0 at the job's last update);
//   async/ssp only, adam or momentum: --adam_beta1 / --momentum lowered for
//                         the momentum asynchrony itself adds
//                         (AsyncMomentum).
// The constants were chosen from the 10-epoch measurements in README.md
// ("Learning-rate rules"). Flags in --server_args come later on the command
// line and win.
//
//   absl::StatusOr<int64_t> n = CountTrainingExamples(o.data_dir);
//   o.lr_rule_args = LrRuleArgs(o, *n);
//
// Pure functions apart from CountTrainingExamples (reads one small file).
#ifndef DOWNPOUR_DEPLOY_LR_RULES_H_
#define DOWNPOUR_DEPLOY_LR_RULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/launch_options.h"

namespace downpour {

inline constexpr double kWarmupShare = 0.05;
inline constexpr char kDefaultOptimizer[] = "adam";
inline constexpr char kAsyncScaling[] = "none";

// Adam's first-moment decay and the momentum optimizer's coefficient before
// the asynchrony rule below.
inline constexpr double kMomentum = 0.9;

// Asynchrony begets momentum (Mitliagkas et al. 2016): W workers pushing
// gradients computed on parameters about W - 1 updates old act like an extra
// momentum of 1 - 1/W, so async and ssp servers get an explicit momentum of
// max(0, momentum - (1 - 1/W)) (W = 8: 0.025 for 0.9), keeping the total
// near what one worker has. Measured in README ("Learning-rate rules").
double AsyncMomentum(double momentum, int workers);

// The launcher's --lr when none is given: per optimizer, the rate for one
// worker's gradient of batch 64 (adam 0.001, adagrad 0.05, momentum 0.02,
// sgd 0.05); the rules above scale it for the mode.
double DefaultLearningRate(const std::string& optimizer);

// Updates each chunk of a shard receives over the whole job: one per step in
// sync mode, one per push of every worker in async and ssp modes. Uses the
// workers' data split (each process reads ceil(n / workers) examples per
// epoch, batch_size x replicas per step) and n_push. >= 1.
int64_t JobUpdatesPerChunk(const LaunchOptions& o, int64_t train_examples);

// The server flags of the rules above for this job; empty when
// o.lr_schedule is "none".
std::vector<std::string> LrRuleArgs(const LaunchOptions& o,
                                    int64_t train_examples);

// The number of training examples the workers will read: the count in the
// header of <data_dir>/train-labels-idx1-ubyte[.gz] (Fashion-MNIST, MNIST),
// capped by max_train_examples when that is set. NotFound / DataLoss naming
// the file when it cannot be read.
absl::StatusOr<int64_t> CountTrainingExamples(const std::string& data_dir,
                                              int64_t max_train_examples);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LR_RULES_H_
