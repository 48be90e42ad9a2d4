#include "server/store_flags.h"

#include <cmath>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flag_args.h"

ABSL_FLAG(std::string, optimizer, downpour::kDefaultOptimizer,
          "Server-side optimizer: sgd, momentum, adagrad or adam.");
ABSL_FLAG(double, lr, 0,
          "Learning rate of the server-side optimizer for one worker's "
          "gradient; 0 picks the optimizer's default (adam 0.001, adagrad "
          "0.05, momentum 0.02, sgd 0.05).");
ABSL_FLAG(std::string, lr_schedule, "auto",
          "auto: the learning-rate rules sized from the job's shape (--mode, "
          "the workers, --epochs, --batch_size, --n_push, the data set): "
          "sync's rate scaled by the gradients averaged per step, warm-up "
          "over 5% of the job's updates, cosine decay to 0 at its last, "
          "async's momentum lowered for W workers; each --lr_* / "
          "--adam_beta1 / --momentum flag given wins over its rule. none: a "
          "constant rate unless those flags say otherwise.");
ABSL_FLAG(double, momentum, downpour::kMomentum,
          "Momentum coefficient (--optimizer=momentum).");
ABSL_FLAG(double, adagrad_initial_accumulator,
          downpour::OptimizerOptions{}.adagrad_initial_accumulator,
          "Initial Adagrad accumulator (--optimizer=adagrad).");
ABSL_FLAG(std::string, lr_decay, downpour::LrSchedule{}.decay,
          "Learning-rate decay after the warm-up: none, cosine or step "
          "(keyed to each chunk's update count).");
ABSL_FLAG(int64_t, lr_warmup_updates, 0,
          "Linear warm-up over the first N updates of each chunk (0: none).");
ABSL_FLAG(int64_t, lr_decay_updates, 0,
          "--lr_decay=cosine: the update count where the rate reaches "
          "--lr_min_factor * lr.");
ABSL_FLAG(double, lr_min_factor, 0.0, "--lr_decay=cosine: final rate / lr.");
ABSL_FLAG(int64_t, lr_step_every, 0, "--lr_decay=step: updates per decay.");
ABSL_FLAG(double, lr_step_gamma, downpour::LrSchedule{}.step_gamma,
          "--lr_decay=step: factor per decay.");
ABSL_FLAG(std::string, lr_worker_scaling, "none",
          "none, linear or sqrt: sync multiplies lr by k (or sqrt k), the "
          "gradients averaged per step; async/ssp divide it by W (or sqrt W).");
ABSL_FLAG(double, adam_beta1, downpour::kMomentum,
          "--optimizer=adam: first-moment decay.");
ABSL_FLAG(double, adam_beta2, downpour::OptimizerOptions{}.adam_beta2,
          "--optimizer=adam: second-moment decay.");
ABSL_FLAG(double, adam_epsilon, downpour::OptimizerOptions{}.adam_epsilon,
          "--optimizer=adam: epsilon.");
ABSL_FLAG(double, weight_decay, 0.0,
          "--optimizer=adam: decoupled weight decay (AdamW); 0 is off.");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "sync: gradients per step (0: all workers); fewer gives backup "
          "workers.");
ABSL_FLAG(int, staleness, downpour::kDefaultStaleness,
          "ssp: clocks a worker may run ahead of the slowest (>= 0).");
ABSL_FLAG(bool, staleness_aware, false,
          "async: divide each update's step by its staleness.");
ABSL_FLAG(int64_t, drop_stale_threshold, 0,
          "async: drop updates staler than this (0: never).");
ABSL_FLAG(double, sync_timeout_s, 30,
          "sync/ssp: seconds to wait for a missing worker before going on "
          "without it; ten times this for a worker not heard from yet (its "
          "process may still be starting).");
ABSL_FLAG(int, min_replicas, 1,
          "sync/ssp: fewest workers to go on with; below it the job aborts.");
ABSL_FLAG(double, checkpoint_every_s, 2,
          "Seconds between a shard's snapshots, with a checkpoint folder "
          "(0: only when stopped). A killed shard loses at most this much of "
          "its updates; a snapshot of fashion_cnn's shard takes about 30 ms "
          "to write (docs/results.md).");

namespace downpour {
namespace {

// A worker not heard from yet is waited for this many sync timeouts
// (ParameterStoreOptions::join_timeout).
constexpr int kJoinTimeoutFactor = 10;

// Every flag of this file, for GivenStoreFlagArgs and StoreFlags::given.
const char* const kStoreFlagNames[] = {
    "optimizer", "lr", "lr_schedule", "momentum",
    "adagrad_initial_accumulator", "lr_decay", "lr_warmup_updates",
    "lr_decay_updates", "lr_min_factor", "lr_step_every", "lr_step_gamma",
    "lr_worker_scaling", "adam_beta1", "adam_beta2", "adam_epsilon",
    "weight_decay", "replicas_to_aggregate", "staleness", "staleness_aware",
    "drop_stale_threshold", "sync_timeout_s", "min_replicas",
    "checkpoint_every_s"};

}  // namespace

absl::StatusOr<StoreFlags> StoreFlagsFromFlags() {
  StoreFlags f;
  for (const char* name : kStoreFlagNames) {
    if (FlagGiven(name)) f.given.insert(name);
  }
  ParameterStoreOptions& s = f.store;
  OptimizerOptions& o = s.optimizer;
  o.name = absl::GetFlag(FLAGS_optimizer);
  o.learning_rate = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  o.adagrad_initial_accumulator =
      static_cast<float>(absl::GetFlag(FLAGS_adagrad_initial_accumulator));
  o.schedule.decay = absl::GetFlag(FLAGS_lr_decay);
  o.schedule.warmup_updates = absl::GetFlag(FLAGS_lr_warmup_updates);
  o.schedule.decay_updates = absl::GetFlag(FLAGS_lr_decay_updates);
  o.schedule.min_factor = static_cast<float>(absl::GetFlag(FLAGS_lr_min_factor));
  o.schedule.step_every = absl::GetFlag(FLAGS_lr_step_every);
  o.schedule.step_gamma = static_cast<float>(absl::GetFlag(FLAGS_lr_step_gamma));
  o.adam_beta1 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta1));
  o.adam_beta2 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta2));
  o.adam_epsilon = static_cast<float>(absl::GetFlag(FLAGS_adam_epsilon));
  o.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  f.lr_worker_scaling = absl::GetFlag(FLAGS_lr_worker_scaling);
  const std::string schedule = absl::GetFlag(FLAGS_lr_schedule);
  if (schedule != "auto" && schedule != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr_schedule must be auto or none, got '", schedule, "'"));
  }
  f.lr_schedule_auto = schedule == "auto";
  if (!std::isfinite(o.learning_rate) || o.learning_rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr must be a finite number >= 0 (0: the optimizer's default), "
        "got ", absl::GetFlag(FLAGS_lr)));
  }
  s.replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  s.staleness = absl::GetFlag(FLAGS_staleness);
  s.staleness_aware = absl::GetFlag(FLAGS_staleness_aware);
  s.drop_stale_threshold = absl::GetFlag(FLAGS_drop_stale_threshold);
  const double timeout_s = absl::GetFlag(FLAGS_sync_timeout_s);
  if (!std::isfinite(timeout_s) || timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync_timeout_s must be a finite number > 0, got ", timeout_s));
  }
  s.sync_timeout = absl::Seconds(timeout_s);
  s.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  const double every_s = absl::GetFlag(FLAGS_checkpoint_every_s);
  if (!std::isfinite(every_s) || every_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every_s must be a finite number >= 0, got ", every_s));
  }
  f.checkpoint_every = absl::Seconds(every_s);
  return f;
}

absl::Status ApplyStoreFlags(const StoreFlags& flags,
                             const std::optional<JobShape>& job,
                             ParameterStoreOptions* out) {
  const ParameterStoreOptions& s = flags.store;
  out->optimizer = s.optimizer;
  out->replicas_to_aggregate = s.replicas_to_aggregate;
  out->staleness = s.staleness;
  out->staleness_aware = s.staleness_aware;
  out->drop_stale_threshold = s.drop_stale_threshold;
  out->sync_timeout = s.sync_timeout;
  out->join_timeout = kJoinTimeoutFactor * s.sync_timeout;
  out->min_replicas = s.min_replicas;
  OptimizerOptions& o = out->optimizer;
  if (o.learning_rate == 0) {
    o.learning_rate = static_cast<float>(DefaultLearningRate(o.name));
  }
  std::string scaling = flags.lr_worker_scaling;
  if (flags.lr_schedule_auto && job.has_value()) {
    const std::string rule = ApplyLrRules(AutoLrRules(*job, o.name), flags.given, &o);
    if (flags.given.count("lr_worker_scaling") == 0) scaling = rule;
  }
  if (scaling == "none") return absl::OkStatus();
  const bool aggregated = out->mode == TrainMode::kSync;
  const int workers = aggregated && out->replicas_to_aggregate > 0
                          ? out->replicas_to_aggregate
                          : out->num_workers;
  absl::StatusOr<float> lr =
      ScaleLearningRate(o.learning_rate, scaling, aggregated, workers);
  if (!lr.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_worker_scaling: ", lr.status().message()));
  }
  o.learning_rate = *lr;
  return absl::OkStatus();
}

std::vector<std::string> GivenStoreFlagArgs() {
  return GivenFlagArgs(std::vector<const char*>(std::begin(kStoreFlagNames),
                                                std::end(kStoreFlagNames)));
}

}  // namespace downpour
