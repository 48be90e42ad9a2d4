#include "worker/downpour_loop.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace downpour {

absl::StatusOr<std::unique_ptr<DownpourLoop>> DownpourLoop::Create(
    const TrainerOptions& options, absl::Span<const Replica> replicas,
    ParameterClient* client,
    std::function<void(const Progress&)> on_progress) {
  if (options.n_fetch < 1 || options.n_push < 1) {
    return absl::InvalidArgumentError("n_fetch and n_push must be >= 1");
  }
  if (options.mode == TrainMode::kSync &&
      (options.n_fetch != 1 || options.n_push != 1)) {
    return absl::InvalidArgumentError(
        "sync mode pushes and fetches every step: use n_fetch = n_push = 1");
  }
  HostAllocator* alloc = options.host_allocator != nullptr
                             ? options.host_allocator
                             : DefaultHostAllocator();
  // The replica's own step between fetches only makes sense when it keeps
  // its parameters for more than one step.
  const float local_lr = options.n_fetch > 1 ? options.local_lr : 0.0f;
  DP_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> group,
                      ReplicaGroup::Create(replicas, alloc, local_lr));
  ExchangeOptions eo;
  eo.mode = options.mode;
  eo.n_fetch = options.n_fetch;
  eo.n_push = options.n_push;
  eo.overlap = options.overlap;
  eo.wait_free = options.wait_free;
  eo.bucket_bytes = options.bucket_bytes;
  eo.early_pulls = options.early_pulls;
  eo.fresh_wait_fraction = options.fresh_wait_fraction;
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Exchange> exchange,
                      Exchange::Create(eo, client, group.get(), alloc));
  return std::unique_ptr<DownpourLoop>(
      new DownpourLoop(options, client, std::move(on_progress),
                       std::move(group), std::move(exchange)));
}

DownpourLoop::DownpourLoop(const TrainerOptions& options,
                           ParameterClient* client,
                           std::function<void(const Progress&)> on_progress,
                           std::unique_ptr<ReplicaGroup> group,
                           std::unique_ptr<Exchange> exchange)
    : options_(options),
      client_(client),
      on_progress_(std::move(on_progress)),
      group_(std::move(group)),
      exchange_(std::move(exchange)),
      begin_(absl::Now()),
      window_(begin_) {
  // The position names a step once its push is acknowledged, and before the
  // next push can start (Exchange::set_on_acknowledged).
  exchange_->set_on_acknowledged(
      [this](int64_t steps) { RecordPosition(steps); });
}

absl::StatusOr<TrainResult> DownpourLoop::Run() {
  begin_ = absl::Now();
  window_ = ProgressWindow(begin_);
  clock_.Restart();
  // First parameters: always a plain pull.
  DP_RETURN_IF_ERROR(exchange_->PullFirst());
  window_.times().pull += clock_.Lap();
  Resume();
  bool ended = true;
  while (options_.max_steps == 0 || result_.steps < options_.max_steps) {
    if (options_.stop_requested != nullptr &&
        options_.stop_requested->load(std::memory_order_relaxed)) {
      ended = false;  // Graceful stop; Finish pushes and leaves.
      break;
    }
    DP_ASSIGN_OR_RETURN(const bool stepped, Step());
    if (!stepped) break;
  }
  DP_RETURN_IF_ERROR(Finish(ended));
  return result_;
}

void DownpourLoop::Resume() {
  if (options_.position == nullptr) return;
  const int64_t steps = options_.position->Read();
  if (steps <= 0) return;
  clock_.Restart();
  int64_t skipped = 0;
  while (skipped < steps &&
         (options_.max_steps == 0 || skipped < options_.max_steps) &&
         group_->NextBatches()) {
    ++skipped;
  }
  result_.steps = skipped;
  epoch_ = group_->epoch();
  window_.times().data += clock_.Lap();
  std::printf("resuming at step %lld (epoch %d): the data position a "
              "previous process of this worker reached (%s)\n",
              static_cast<long long>(skipped), epoch_,
              options_.position->path().c_str());
  std::fflush(stdout);
}

void DownpourLoop::RecordPosition(int64_t steps) {
  if (options_.position == nullptr) return;
  absl::Status s = options_.position->Write(steps);
  if (!s.ok() && !position_write_failed_) {
    position_write_failed_ = true;
    std::fprintf(stderr, "%s; training goes on (a restart would begin its "
                 "data again)\n", std::string(s.message()).c_str());
  }
}

absl::StatusOr<bool> DownpourLoop::Step() {
  clock_.Restart();
  if (!group_->NextBatches()) return false;
  epoch_ = group_->epoch();
  window_.times().data += clock_.Lap();

  if (result_.steps > 0 && result_.steps % options_.n_fetch == 0) {
    DP_RETURN_IF_ERROR(exchange_->Fetch());
    window_.times().pull += clock_.Lap();
  }

  DP_RETURN_IF_ERROR(Compute());
  // Waits inside the step (wait-free exchange) are the exchange's time.
  const HookWaits waits = exchange_->TakeHookWaits();
  window_.times().compute += clock_.Lap() - waits.pull - waits.push;
  window_.times().pull += waits.pull;
  window_.times().push += waits.push;

  if (result_.steps % options_.n_push == 0) {
    DP_RETURN_IF_ERROR(exchange_->Push(result_.steps));
    result_.pushes = exchange_->pushes();
    window_.times().push += clock_.Lap();
  }
  MaybeReport();
  return true;
}

absl::Status DownpourLoop::Compute() {
  const StepHooks* hooks = exchange_->hooks();
  DP_ASSIGN_OR_RETURN(const GroupStep s,
                      hooks != nullptr
                          ? group_->ComputeWithHooks(result_.steps, *hooks)
                          : group_->Compute(result_.steps));
  if (options_.debug_step_delay > absl::ZeroDuration()) {
    absl::SleepFor(options_.debug_step_delay);
  }
  ++result_.steps;
  result_.examples += s.examples;
  window_.AddStep(s.loss, s.examples);
  return absl::OkStatus();
}

void DownpourLoop::MaybeReport() {
  if (options_.log_every <= 0 || result_.steps % options_.log_every != 0) {
    return;
  }
  const PhaseTimes times = window_.times();
  const Progress p = window_.Close(result_.steps, epoch_);
  if (on_progress_) on_progress_(p);
  result_.final_loss = p.loss;
  logged_window_ = true;
  result_.total += times;
}

absl::Status DownpourLoop::Finish(bool ended) {
  clock_.Restart();
  DP_RETURN_IF_ERROR(exchange_->Finish());
  result_.pushes = exchange_->pushes();
  window_.times().push += clock_.Lap();
  DP_RETURN_IF_ERROR(client_->Leave());
  if (options_.position != nullptr) {
    // The end of the data: a later process of this index starts afresh. A
    // graceful stop keeps the position of its last push.
    if (ended) {
      absl::Status s = options_.position->Remove();
      if (!s.ok()) std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    } else {
      RecordPosition(result_.steps);  // Finish pushed everything.
    }
  }
  if (window_.steps() > 0 &&
      (!logged_window_ || window_.steps() * 2 >= options_.log_every)) {
    result_.final_loss = window_.MeanLoss();
  }
  result_.total += window_.times();
  result_.seconds = absl::ToDoubleSeconds(absl::Now() - begin_);
  return absl::OkStatus();
}

}  // namespace downpour
