#include "worker/exchange.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

void Exchange::Acknowledged(int64_t steps) {
  if (steps <= acknowledged_steps_) return;
  acknowledged_steps_ = steps;
  if (on_acknowledged_) on_acknowledged_(steps);
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
  absl::Status Push(int64_t steps) override {
    DP_RETURN_IF_ERROR(PushNow());
    Acknowledged(steps);
    return absl::OkStatus();
  }
};

// The exchanges with one push (or push and pull) in flight on a background
// thread, and the buffers it uses.
class BackgroundExchange : public Exchange {
 public:
  BackgroundExchange(const ExchangeOptions& options, ParameterClient* client,
                     ReplicaGroup* group, HostArray<float> params,
                     HostArray<float> grads, HostArray<float> incoming,
                     HostArray<float> sending)
      : Exchange(options, client, group, std::move(params), std::move(grads)),
        incoming_{std::move(incoming), {}},
        sending_(std::move(sending)) {}

 protected:
  // Waits for the background job; once it has ended well, its push is
  // acknowledged.
  absl::Status WaitBackground() override {
    DP_RETURN_IF_ERROR(comm_.Wait());
    Acknowledged(job_steps_);
    return absl::OkStatus();
  }

  // The parameters a pull brought, once the exchange has finished (with
  // `wait`, waiting for it); else the group keeps its parameters.
  absl::Status TakePulled(bool wait) {
    if (!incoming_pull_ || (!wait && !comm_.Finished())) {
      return absl::OkStatus();
    }
    DP_RETURN_IF_ERROR(WaitBackground());
    incoming_pull_ = false;
    return Load(&incoming_);
  }

  Snapshot incoming_;                  // The parameters being pulled.
  HostArray<float> sending_;           // The gradient being pushed.
  std::vector<int64_t> sending_base_;  // The versions it was computed from.
  bool incoming_pull_ = false;         // The background job ends with a pull.
  int64_t job_steps_ = 0;  // The steps of the push the background job sends.
  // Last: joined before the buffers above go. A subclass whose jobs use
  // members of its own waits for the job in its destructor.
  JobThread comm_;
};

// The whole push (or push-and-pull) handed to the background after the step.
class OverlappedExchange final : public BackgroundExchange {
 public:
  using BackgroundExchange::BackgroundExchange;

  absl::Status Fetch() override {
    // Sync needs this step's parameters; async/ssp take them if here.
    return TakePulled(/*wait=*/options_.mode == TrainMode::kSync);
  }

  absl::Status Push(int64_t steps) override {
    // One exchange in flight: finish the previous one (keeping its
    // parameters for the next fetch), then hand this one over.
    DP_RETURN_IF_ERROR(WaitBackground());
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
    job_steps_ = steps;
    comm_.Start([this, push_seq, wait, fetch_next] {
      return Send(push_seq, wait, fetch_next);
    });
    return absl::OkStatus();
  }

 private:
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
};

// The flat offsets where wait-free buckets begin (ascending, > 0): tensors
// from the end of the model grouped until a bucket holds bucket_bytes.
std::vector<int64_t> BucketBreaks(const std::vector<TensorSpec>& specs,
                                  int64_t bucket_bytes) {
  std::vector<int64_t> begin(specs.size());
  int64_t offset = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    begin[t] = offset;
    offset += specs[t].NumElements();
  }
  std::vector<int64_t> breaks;
  int64_t bytes = 0;
  for (size_t t = specs.size(); t-- > 1;) {
    bytes += specs[t].NumElements() * 4;
    if (bytes >= bucket_bytes) {
      breaks.push_back(begin[t]);
      bytes = 0;
    }
  }
  std::reverse(breaks.begin(), breaks.end());
  return breaks;
}

// Wait-free backpropagation: the overlapped exchange whose sends start
// inside the step (exchange.h). The step's hooks run on the loop's thread;
// the background job streams the gradient's buckets as the hooks release
// them, then (sync, ssp) pulls, telling the hooks which chunks arrived.
class WaitFreeExchange final : public BackgroundExchange {
 public:
  // `staging` (may be null): where the gradient is copied out of the model
  // instead of sending_ (ParameterClient::PushStaging).
  WaitFreeExchange(const ExchangeOptions& options, ParameterClient* client,
                   ReplicaGroup* group, HostArray<float> params,
                   HostArray<float> grads, HostArray<float> incoming,
                   HostArray<float> sending, float* staging)
      : BackgroundExchange(options, client, group, std::move(params),
                           std::move(grads), std::move(incoming),
                           std::move(sending)),
        send_(staging != nullptr ? staging : sending_.data()),
        land_(options.mode == TrainMode::kSync ? group->HostParameters()
                                               : nullptr) {
    hooks_.before_forward = [this](int64_t b, int64_t e) {
      return BeforeForward(b, e);
    };
    hooks_.gradients_ready = [this](int64_t from) {
      return GradientsReady(from);
    };
    const ShardMap& map = client_->shard_map();
    for (const Chunk& c : map.chunks) {
      by_offset_.push_back({c.flat_offset, c.num_elements, c.id});
    }
    std::sort(by_offset_.begin(), by_offset_.end());
    absl::MutexLock l(&mu_);
    arrived_.assign(map.chunks.size(), 1);
  }

  ~WaitFreeExchange() override {
    {
      // A step that failed half-way leaves the job waiting for buckets.
      absl::MutexLock l(&mu_);
      abort_ = true;
      cv_.SignalAll();
    }
    comm_.Wait().IgnoreError();  // The job uses the members below.
    // A step that failed may leave copies into sending_ under way.
    group_->WaitGradientCopies().IgnoreError();
  }

  const StepHooks* hooks() const override { return &hooks_; }

  HookWaits TakeHookWaits() override {
    HookWaits w = waits_;
    waits_ = {};
    return w;
  }

  absl::Status Fetch() override {
    if (options_.mode == TrainMode::kSync) {
      // This step's forward takes each layer's parameters as they arrive.
      per_layer_ = incoming_pull_;
      return absl::OkStatus();
    }
    // Async, ssp: the newest parameters that have arrived. The exchange
    // still in flight is usually the last step's (its last bucket left at
    // the end of the backward pass, a round trip ago at most): in async it
    // gets a share of a step's time to arrive. Otherwise the one before
    // it, which the backward pass waited for, is the newest.
    if (options_.mode == TrainMode::kAsync && incoming_pull_ &&
        step_began_ != absl::InfinitePast() &&
        options_.fresh_wait_fraction > 0) {
      comm_.WaitFinished((absl::Now() - step_began_) *
                         options_.fresh_wait_fraction);
    }
    step_began_ = absl::Now();
    if (incoming_pull_ && comm_.Finished()) {
      current_pending_ = false;
      return TakePulled(/*wait=*/false);
    }
    if (current_pending_) {
      current_pending_ = false;
      return Load(&current_);
    }
    return absl::OkStatus();
  }

  absl::Status Push(int64_t steps) override {
    if (!streaming_) {
      return absl::InternalError(
          "wait-free exchange: the step released no gradient");
    }
    streaming_ = false;
    job_steps_ = steps;  // The job that GradientsReady started.
    incoming_pull_ = true;
    return absl::OkStatus();
  }

 private:
  struct ChunkAt {
    int64_t offset, length;
    int32_t id;
    bool operator<(const ChunkAt& o) const { return offset < o.offset; }
  };

  // True when every chunk overlapping flat [b, e) has arrived.
  bool RangeArrived(int64_t b, int64_t e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = std::upper_bound(by_offset_.begin(), by_offset_.end(),
                               ChunkAt{b, 0, 0});
    if (it != by_offset_.begin()) --it;
    for (; it != by_offset_.end() && it->offset < e; ++it) {
      if (it->offset + it->length > b && !arrived_[it->id]) return false;
    }
    return true;
  }

  absl::Status BeforeForward(int64_t b, int64_t e) {
    // The first step has no Fetch: its time counts from here.
    if (step_began_ == absl::InfinitePast()) step_began_ = absl::Now();
    if (!per_layer_) return absl::OkStatus();
    const absl::Time start = absl::Now();
    bool arrived;
    {
      absl::MutexLock l(&mu_);
      while (!comm_done_ && !RangeArrived(b, e)) cv_.Wait(&mu_);
      arrived = RangeArrived(b, e);
    }
    if (!arrived) {
      DP_RETURN_IF_ERROR(WaitBackground());
      return absl::InternalError("wait-free exchange: a pull ended early");
    }
    waits_.pull += absl::ToDoubleSeconds(absl::Now() - start);
    return group_->SetParameterRange(absl::MakeConstSpan(PullTarget(), n_), b,
                                     e);
  }

  absl::Status GradientsReady(int64_t from) {
    if (!streaming_) {
      // One exchange in flight: the previous one ends before this one
      // starts (in sync mode its pull is complete: the forward took it).
      const absl::Time start = absl::Now();
      DP_RETURN_IF_ERROR(WaitBackground());
      waits_.push += absl::ToDoubleSeconds(absl::Now() - start);
      if (per_layer_) {
        // Sync: the forward took the pulled parameters; they become the
        // current ones (with land_, only their versions: the values went
        // straight into the model, and current_.params is stale).
        std::swap(current_.params, incoming_.params);
        std::swap(current_.versions, incoming_.versions);
        per_layer_ = false;
        incoming_pull_ = false;
      }
      // The versions this step's gradient was computed from.
      sending_base_ = current_.versions;
      if (incoming_pull_) {
        // Async, ssp: the finished exchange's parameters, which the model
        // (still in its backward pass) cannot take yet, are kept for the
        // next step before this exchange writes over them.
        std::swap(current_.params, incoming_.params);
        std::swap(current_.versions, incoming_.versions);
        incoming_pull_ = false;
        current_pending_ = true;
      }
      streaming_ = true;
      copied_from_ = n_;
      const int64_t seq = ++seq_;
      ++pushes_;
      PullOptions wait = WaitFor(sending_base_);
      {
        absl::MutexLock l(&mu_);
        ready_from_ = n_;
        comm_done_ = false;
        if (options_.mode != TrainMode::kAsync) {
          std::fill(arrived_.begin(), arrived_.end(), 0);
        }
      }
      comm_.Start([this, seq, wait]() mutable { return Stream(seq, wait); });
    }
    if (from < copied_from_) {
      // On a GPU the copy runs on while the earlier layers' backward does;
      // the job waits for it before sending (Stream).
      DP_RETURN_IF_ERROR(group_->StartGradientCopy(
          from, copied_from_, absl::MakeSpan(send_, n_)));
      copied_from_ = from;
      absl::MutexLock l(&mu_);
      ready_from_ = from;
      cv_.SignalAll();
    }
    return absl::OkStatus();
  }

  // The background job: sends each released bucket once its copy out of
  // the model has finished, then pulls (sync and ssp; async's buckets went
  // as PushPulls; sync's last bucket goes with the pull,
  // ParameterClient::PushRestThenPull). Touches sending_,
  // sending_base_, incoming_ and the client, which the loop's thread leaves
  // alone until comm_.Wait() (or, for incoming_, until a chunk arrived).
  absl::Status Stream(int64_t seq, PullOptions wait) {
    const absl::Span<const float> grads = absl::MakeConstSpan(send_, n_);
    const bool async = options_.mode == TrainMode::kAsync;
    const bool sync = options_.mode == TrainMode::kSync;
    PulledValues pulled{absl::MakeSpan(PullTarget(), n_), &incoming_.versions};
    if (!async) {
      wait.on_chunks = [this](absl::Span<const int32_t> ids) {
        absl::MutexLock l(&mu_);
        for (int32_t id : ids) arrived_[id] = 1;
        cv_.SignalAll();
      };
    }
    absl::Status s;
    bool pulled_all = async;
    for (int64_t sent = n_; s.ok() && sent > 0;) {
      int64_t from;
      bool stopped;
      {
        absl::MutexLock l(&mu_);
        while (!abort_ && ready_from_ >= sent) cv_.Wait(&mu_);
        stopped = abort_;
        from = ready_from_;
      }
      if (stopped) {
        // Outside mu_: the carried pulls' on_chunks takes it.
        client_->WaitCarriedPulls().IgnoreError();
        return absl::CancelledError("wait-free exchange stopped");
      }
      s = group_->WaitGradientCopies();
      if (!s.ok()) break;
      if (sync && from == 0) {
        s = client_->PushRestThenPull(seq, grads, sending_base_, pulled.params,
                                      pulled.versions, wait);
        pulled_all = true;
      } else if (sync && options_.early_pulls) {
        s = client_->PushFromCarryingPulls(seq, grads, sending_base_, from,
                                           pulled.params, pulled.versions,
                                           wait);
      } else {
        s = client_->PushFrom(seq, grads, sending_base_, from,
                              async ? &pulled : nullptr);
      }
      sent = from;
    }
    if (s.ok() && !pulled_all) {
      s = client_->Pull(pulled.params, pulled.versions, wait);
    }
    // A failed push may have left carried pulls writing into incoming_.
    if (!s.ok()) client_->WaitCarriedPulls().IgnoreError();
    absl::MutexLock l(&mu_);
    comm_done_ = true;
    cv_.SignalAll();
    return s;
  }

  // Where a pull's values go: land_, or incoming_ (then copied into the
  // model as the forward takes each range).
  float* PullTarget() { return land_ != nullptr ? land_ : incoming_.params.data(); }

  // The gradient being pushed: sending_, or the client's push staging
  // (sending_ then empty).
  float* const send_;
  // Sync on a CPU backend: the model's own parameters
  // (ReplicaGroup::HostParameters), where pulls write directly, so that
  // the forward copies nothing. Safe because a shard's values for the next
  // step come only after this worker's last part for that shard went,
  // which GradientsReady released once the backward pass had finished with
  // every tensor of it (a layer reads its weights for its input gradient,
  // computed no later than its weight gradient), and the forward reads a
  // range only once BeforeForward saw it arrive. Null otherwise.
  float* const land_;
  StepHooks hooks_;
  std::vector<ChunkAt> by_offset_;  // The chunks in flat order.
  bool per_layer_ = false;      // This step's forward waits per layer.
  bool streaming_ = false;      // This step's push has started.
  // current_ holds parameters the model has not loaded yet (async, ssp).
  bool current_pending_ = false;
  int64_t copied_from_ = 0;     // sending_ holds the gradient from here.
  HookWaits waits_;
  // When the step under way began: its Fetch (the first step's first
  // forward hook).
  absl::Time step_began_ = absl::InfinitePast();

  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t ready_from_ ABSL_GUARDED_BY(mu_) = 0;  // Released for sending.
  bool comm_done_ ABSL_GUARDED_BY(mu_) = true;
  bool abort_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<char> arrived_ ABSL_GUARDED_BY(mu_);  // Per chunk id.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Exchange>> Exchange::Create(
    const ExchangeOptions& options, ParameterClient* client,
    ReplicaGroup* group, HostAllocator* alloc) {
  if (options.n_fetch < 1) {
    return absl::InvalidArgumentError("n_fetch must be >= 1");
  }
  if (options.bucket_bytes < 1) {
    return absl::InvalidArgumentError("bucket_bytes must be >= 1");
  }
  if (!(options.fresh_wait_fraction >= 0 && options.fresh_wait_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "fresh_wait_fraction must be in [0, 1]");
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
  if (options.wait_free && options.n_fetch == 1 && options.n_push == 1 &&
      group->CanStream()) {
    DP_RETURN_IF_ERROR(client->SetPushBreaks(
        BucketBreaks(group->param_specs(), options.bucket_bytes)));
    // A pinned staging buffer stays: the device copies into it directly.
    float* staging = alloc->device_mapped() ? nullptr : client->PushStaging();
    // With the client's staging, sending_ is not used.
    DP_ASSIGN_OR_RETURN(HostArray<float> sending,
                        HostArray<float>::Create(alloc, staging ? 0 : n));
    return std::unique_ptr<Exchange>(new WaitFreeExchange(
        options, client, group, std::move(params), std::move(grads),
        std::move(incoming), std::move(sending), staging));
  }
  DP_ASSIGN_OR_RETURN(HostArray<float> sending,
                      HostArray<float>::Create(alloc, n));
  return std::unique_ptr<Exchange>(new OverlappedExchange(
      options, client, group, std::move(params), std::move(grads),
      std::move(incoming), std::move(sending)));
}

}  // namespace downpour

