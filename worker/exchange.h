// File: worker/exchange.h
//
// How a Downpour worker trades gradients for parameters with the servers.
// Two implementations behind one interface, picked by Exchange::Create:
//
//  * synchronous: Fetch() pulls and Push() pushes on the calling thread, so
//    the replicas wait for both;
//  * wait-free (the default with overlap, see ExchangeOptions::wait_free):
//    the overlapped exchange with its sends moved into the step: hooks
//    between the layers push each bucket of the gradient as soon as the
//    backward pass has produced it (the last layers first), while the
//    earlier layers' backward still runs (on a GPU each bucket's copy to
//    the host runs on a second stream, Backend::CopyToHostAsync), and in
//    sync mode let each layer's forward wait only for its own parameters of
//    the pull under way. In async mode each bucket goes as a PushPull whose
//    reply brings that bucket's new parameters; a step takes the newest
//    that have arrived, one exchange behind at most, after a bounded wait
//    for the last step's (ExchangeOptions::fresh_wait_fraction);
//  * overlapped: Push() hands step t's gradient (and, at a fetch step, the
//    pull of the next parameters, as one PushPull) to a background thread
//    while the replicas compute step t+1. In async and ssp mode Fetch() then
//    takes the newest parameters that have arrived (one step older than
//    without overlap); in sync mode it waits for the step's parameters, so
//    results are identical to the synchronous exchange.
//
// What a pull waits for depends on the mode: sync's pull after a push waits
// until the servers completed the step after the pushed one; ssp's pull
// carries this worker's clock (pushes so far); async never waits.
//
// Usage (the Downpour loop, see downpour_loop.h):
//   DP_ASSIGN_OR_RETURN(auto ex, Exchange::Create(o, client, group, alloc));
//   DP_RETURN_IF_ERROR(ex->PullFirst());
//   for each step: if fetching, ex->Fetch(); compute; if pushing, ex->Push(s);
//   DP_RETURN_IF_ERROR(ex->Finish());
//
// Thread-safety: one thread calls every method; the overlapped exchange's
// background job touches only its own staging buffers, the client and (the
// wait-free one) ReplicaGroup::WaitGradientCopies, and Push/Fetch/Finish
// wait for it before touching those buffers.
// Ownership: the client and the replica group are borrowed and must outlive
// the exchange; the exchange owns its (possibly pinned) host staging. The
// wait-free exchange copies the gradient out of the model straight into the
// client's push staging when it has one and the staging is not pinned
// (ParameterClient::PushStaging: the shared-memory push area), so that the
// push needs no second copy.
#ifndef DOWNPOUR_WORKER_EXCHANGE_H_
#define DOWNPOUR_WORKER_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/host_allocator.h"
#include "common/train_mode.h"
#include "worker/ps_client.h"
#include "worker/replica_group.h"

namespace downpour {

struct ExchangeOptions {
  TrainMode mode = TrainMode::kAsync;
  // Fetch parameters every n_fetch steps (>= 1); push every n_push steps.
  int n_fetch = 1;
  int n_push = 1;
  // Push and pull in the background while computing.
  bool overlap = false;
  // With overlap, n_fetch = n_push = 1 and a group that can stream
  // (ReplicaGroup::CanStream): wait-free backpropagation. The gradient
  // leaves in buckets while the backward pass still runs, the end of the
  // model first, and in sync mode each layer's parameters are waited for
  // only just before its forward.
  bool wait_free = true;
  // Wait-free buckets: tensors from the end of the model are grouped until
  // a bucket holds at least this many bytes; each bucket is pushed as soon
  // as the backward pass has produced all of it.
  int64_t bucket_bytes = 256 << 10;
  // Wait-free, sync: a shard's last part carries its pull as soon as it
  // goes, not only at the end of the push
  // (ParameterClient::PushFromCarryingPulls); for a model whose first
  // layer's gradient is final before the end of the backward pass
  // (ModelOptions::defer_weight_gradients).
  bool early_pulls = false;
  // Wait-free, async: a step that begins while the last step's exchange
  // is still in flight (its buckets have all left, and the reply to the
  // last one, the model's first layers, is on its way) waits for it up to
  // this fraction of the previous step's time (the first step's: from its
  // first layer's forward), so that it computes from the parameters that
  // exchange brings rather than from the ones before. Counted as pull
  // time; 0 never waits. (Ssp does not wait: its pull may be held back by
  // the staleness bound.)
  double fresh_wait_fraction = 0.125;
};

// Time a step's compute spent waiting inside the wait-free exchange's hooks,
// for parameters (pull) or for the previous exchange to finish (push).
struct HookWaits {
  double pull = 0, push = 0;
};

class Exchange {
 public:
  // Host staging for parameters and gradients comes from `alloc`
  // (ResourceExhausted when it has no memory for them).
  static absl::StatusOr<std::unique_ptr<Exchange>> Create(
      const ExchangeOptions& options, ParameterClient* client,
      ReplicaGroup* group, HostAllocator* alloc);
  virtual ~Exchange() = default;

  // The first parameters: a plain pull (no wait), loaded into the group.
  absl::Status PullFirst();
  // Before a fetch step's compute: new parameters into the group (if the
  // overlapped exchange has none yet in async/ssp mode, the group keeps its
  // parameters).
  virtual absl::Status Fetch() = 0;
  // After a push step: pushes the group's mean gradient. `steps` counts the
  // steps completed, this one included.
  virtual absl::Status Push(int64_t steps) = 0;
  // The end of the run: waits for background work, then pushes what the
  // group accrued since the last push, if anything.
  absl::Status Finish();

  int64_t pushes() const { return pushes_; }
  // Called with the `steps` of the newest Push the servers have
  // acknowledged (every part applied, or acknowledged as a duplicate) each
  // time that grows, on the thread that calls this exchange's methods
  // (inside Push, Fetch, a hook or Finish). With overlap a push is
  // acknowledged when a later call waits for the background job that sent
  // it, at the latest before the next push starts, so the steps may trail
  // Push by one: a worker killed then has lost no gradient of a step up to
  // them, and a record kept here is at most one push behind what the
  // servers may have applied. Finish's push of the rest of the accrual is
  // not reported.
  void set_on_acknowledged(std::function<void(int64_t steps)> f) {
    on_acknowledged_ = std::move(f);
  }

  // Hooks the replicas' step must call between layers (ReplicaGroup::
  // ComputeWithHooks), or null when this exchange has none.
  virtual const StepHooks* hooks() const { return nullptr; }
  // The time spent waiting inside the hooks since the last call.
  virtual HookWaits TakeHookWaits() { return {}; }

 protected:
  struct Snapshot {
    HostArray<float> params;
    std::vector<int64_t> versions;  // Of each chunk, as pulled.
  };

  Exchange(const ExchangeOptions& options, ParameterClient* client,
           ReplicaGroup* group, HostArray<float> params,
           HostArray<float> grads);

  // What a pull waits for, given the versions the last push was based on.
  PullOptions WaitFor(const std::vector<int64_t>& pushed_from) const;
  // Loads `s` into the group; unless `s` is current_, it becomes current_.
  absl::Status Load(Snapshot* s);
  // Waits for the background job, if any.
  virtual absl::Status WaitBackground() { return absl::OkStatus(); }
  // Gathers the group's gradient into grads_ and pushes it now.
  absl::Status PushNow();
  // The push of `steps` was acknowledged.
  void Acknowledged(int64_t steps);

  const ExchangeOptions options_;
  ParameterClient* const client_;  // Not owned.
  ReplicaGroup* const group_;      // Not owned.
  const int64_t n_;
  Snapshot current_;        // The parameters in use.
  HostArray<float> grads_;  // The gradient being assembled.
  int64_t seq_ = 0;         // Sequence number of the last push.
  int64_t pushes_ = 0;
  int64_t acknowledged_steps_ = 0;  // Reported to on_acknowledged_.
  std::function<void(int64_t)> on_acknowledged_;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_EXCHANGE_H_
