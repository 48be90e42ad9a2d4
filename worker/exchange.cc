#include "worker/exchange.h"

#include <utility>

#include "absl/types/span.h"
#include "common/status_macros.h"
#include "worker/job_thread.h"

namespace downpour {

Exchange::Exchange(const ExchangeOptions& options, ParameterClient* client,
                   ReplicaGroup* group, HostArray<float> params,
                   HostArray<float> grads)
    : options_(options),
      client_(client),
      group_(group),
      n_(group->num_parameters()),
      current_{std::move(params), {}},
      grads_(std::move(grads)) {}

PullOptions Exchange::WaitFor(const std::vector<int64_t>& pushed_from) const {
  PullOptions wait;
  if (options_.mode == TrainMode::kSync && !pushed_from.empty() && seq_ > 0) {
    wait.min_version = pushed_from[0] + 1;  // The step after it.
  } else if (options_.mode == TrainMode::kSsp) {
    wait.worker_clock = seq_;
  }
  return wait;
}

absl::Status Exchange::Load(Snapshot* s) {
  DP_RETURN_IF_ERROR(group_->SetParameters(
      absl::MakeConstSpan(s->params.data(), s->params.size())));
  if (s != &current_) {
    std::swap(current_.params, s->params);
    std::swap(current_.versions, s->versions);
  }
  return absl::OkStatus();
}

absl::Status Exchange::PullFirst() {
  DP_RETURN_IF_ERROR(client_->Pull(absl::MakeSpan(current_.params.data(), n_),
                                   &current_.versions, PullOptions()));
  return Load(&current_);
}

absl::Status Exchange::PushNow() {
  DP_RETURN_IF_ERROR(group_->TakeMeanGradient(grads_.data()));
  DP_RETURN_IF_ERROR(client_->Push(
      ++seq_, absl::MakeConstSpan(grads_.data(), n_), current_.versions));
  ++pushes_;
  return absl::OkStatus();
}

absl::Status Exchange::Finish() {
  DP_RETURN_IF_ERROR(WaitBackground());
  if (group_->accrued_steps() > 0) DP_RETURN_IF_ERROR(PushNow());
  return absl::OkStatus();
}

namespace {

// Pull and push on the caller's thread.
class SynchronousExchange final : public Exchange {
 public:
  using Exchange::Exchange;

  absl::Status Fetch() override {
    DP_RETURN_IF_ERROR(client_->Pull(absl::MakeSpan(current_.params.data(), n_),
                                     &current_.versions,
                                     WaitFor(current_.versions)));
    return Load(&current_);
  }
  absl::Status Push(int64_t /*steps*/) override { return PushNow(); }
};

// One push (or push-and-pull) in flight on a background thread.
class OverlappedExchange final : public Exchange {
 public:
  OverlappedExchange(const ExchangeOptions& options, ParameterClient* client,
                     ReplicaGroup* group, HostArray<float> params,
                     HostArray<float> grads, HostArray<float> incoming,
                     HostArray<float> sending)
      : Exchange(options, client, group, std::move(params), std::move(grads)),
        incoming_{std::move(incoming), {}},
        sending_(std::move(sending)) {}

  absl::Status Fetch() override {
    // Sync needs this step's parameters; async/ssp take them if here.
    if (incoming_pull_ &&
        (options_.mode == TrainMode::kSync || comm_.Finished())) {
      DP_RETURN_IF_ERROR(comm_.Wait());
      incoming_pull_ = false;
      DP_RETURN_IF_ERROR(Load(&incoming_));
    }
    return absl::OkStatus();
  }

  absl::Status Push(int64_t steps) override {
    // One exchange in flight: finish the previous one (keeping its
    // parameters for the next fetch), then hand this one over.
    DP_RETURN_IF_ERROR(comm_.Wait());
    DP_RETURN_IF_ERROR(group_->TakeMeanGradient(grads_.data()));
    std::swap(grads_, sending_);
    const int64_t push_seq = ++seq_;
    ++pushes_;
    const bool fetch_next =
        steps % options_.n_fetch == 0 || options_.n_fetch == 1;
    if (incoming_pull_ && fetch_next) {
      // An earlier pull not used yet: take it now, as this exchange's pull
      // will write over it.
      DP_RETURN_IF_ERROR(Load(&incoming_));
      incoming_pull_ = false;
    }
    sending_base_ = current_.versions;
    const PullOptions wait = WaitFor(sending_base_);
    incoming_pull_ = incoming_pull_ || fetch_next;
    comm_.Start([this, push_seq, wait, fetch_next] {
      return Send(push_seq, wait, fetch_next);
    });
    return absl::OkStatus();
  }

 private:
  absl::Status WaitBackground() override { return comm_.Wait(); }

  // The background job: touches only sending_, sending_base_, incoming_ and
  // the client, which the caller leaves alone until comm_.Wait().
  absl::Status Send(int64_t push_seq, const PullOptions& wait,
                    bool fetch_next) {
    const absl::Span<const float> grads =
        absl::MakeConstSpan(sending_.data(), n_);
    if (!fetch_next) return client_->Push(push_seq, grads, sending_base_);
    // One exchange: each part's values come back right after its push.
    return client_->PushPull(push_seq, grads, sending_base_,
                             absl::MakeSpan(incoming_.params.data(), n_),
                             &incoming_.versions, wait);
  }

  Snapshot incoming_;                  // The parameters being pulled.
  HostArray<float> sending_;           // The gradient being pushed.
  std::vector<int64_t> sending_base_;  // The versions it was computed from.
  bool incoming_pull_ = false;         // The background job ends with a pull.
  JobThread comm_;  // Last: joined before the buffers above go.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Exchange>> Exchange::Create(
    const ExchangeOptions& options, ParameterClient* client,
    ReplicaGroup* group, HostAllocator* alloc) {
  if (options.n_fetch < 1) {
    return absl::InvalidArgumentError("n_fetch must be >= 1");
  }
  const int64_t n = group->num_parameters();
  DP_ASSIGN_OR_RETURN(HostArray<float> params,
                      HostArray<float>::Create(alloc, n));
  DP_ASSIGN_OR_RETURN(HostArray<float> grads,
                      HostArray<float>::Create(alloc, n));
  if (!options.overlap) {
    return std::unique_ptr<Exchange>(new SynchronousExchange(
        options, client, group, std::move(params), std::move(grads)));
  }
  DP_ASSIGN_OR_RETURN(HostArray<float> incoming,
                      HostArray<float>::Create(alloc, n));
  DP_ASSIGN_OR_RETURN(HostArray<float> sending,
                      HostArray<float>::Create(alloc, n));
  return std::unique_ptr<Exchange>(new OverlappedExchange(
      options, client, group, std::move(params), std::move(grads),
      std::move(incoming), std::move(sending)));
}

}  // namespace downpour

