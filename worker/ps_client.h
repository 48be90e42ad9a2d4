// File: worker/ps_client.h
//
// What a worker needs from the parameter servers, independent of transport.
// The worker loop (worker/trainer.h) only sees this interface; the gRPC
// client (worker/grpc_ps_client.h) is one implementation and the in-process
// client over ParameterStore objects (worker/local_ps_client.h, testonly)
// another, used by unit tests.
//
// Parameters and gradients are the model's flat float vector; the client cuts
// it into the chunks of the shard map (common/sharding.h) and talks to every
// shard.
#ifndef DOWNPOUR_WORKER_PS_CLIENT_H_
#define DOWNPOUR_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/shard_stats.h"
#include "common/sharding.h"

namespace downpour {

// What a pull waits for on the servers (sync and ssp modes).
struct PullOptions {
  // Sync: wait until the servers' step is at least this.
  int64_t min_version = 0;
  // Ssp: this worker's clock (pushes completed); -1: do not wait.
  int64_t worker_clock = -1;
  // Called, possibly on another thread and before the pull returns, once
  // the values and versions of these chunks are in place (a chunk may be
  // named again). May be null.
  std::function<void(absl::Span<const int32_t> chunk_ids)> on_chunks;
};

// Where a piecewise push's PushPull parts put the values they bring back.
struct PulledValues {
  absl::Span<float> params;         // The whole flat model.
  std::vector<int64_t>* versions;   // Indexed by chunk id.
};

// Thread-safety: one thread at a time per client.
class ParameterClient {
 public:
  virtual ~ParameterClient() = default;

  // Declares `layout` on every shard and, if a shard is not initialized yet,
  // initializes it from `initial` (the whole flat model). Must succeed before
  // Pull/Push.
  virtual absl::Status Declare(const ModelLayout& layout,
                               absl::Span<const float> initial) = 0;

  // Fills `params` (the whole flat model) from every shard; `versions`
  // receives each chunk's version, indexed by chunk id.
  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions) {
    return Pull(params, versions, PullOptions());
  }
  virtual absl::Status Pull(absl::Span<float> params,
                            std::vector<int64_t>* versions,
                            const PullOptions& options) = 0;

  // Pushes the whole flat gradient with sequence number `seq` (strictly
  // increasing per worker) computed from parameters of `base_versions`
  // (indexed by chunk id). Transient failures are retried with the same seq;
  // the servers apply it at most once.
  virtual absl::Status Push(int64_t seq, absl::Span<const float> grads,
                            absl::Span<const int64_t> base_versions) = 0;

  // Push(seq, grads, base_versions), then Pull(params, versions, options):
  // one Downpour exchange. An implementation may overlap the two (each
  // part's pull right after that part's push), so `grads` and `params`
  // must not overlap, and on an error `params` may hold some new values.
  virtual absl::Status PushPull(int64_t seq, absl::Span<const float> grads,
                                absl::Span<const int64_t> base_versions,
                                absl::Span<float> params,
                                std::vector<int64_t>* versions,
                                const PullOptions& options) {
    absl::Status s = Push(seq, grads, base_versions);
    if (!s.ok()) return s;
    return Pull(params, versions, options);
  }
  // Wait-free backpropagation (worker/exchange.h) pushes a gradient in
  // pieces while the backward pass still computes it, from the end of the
  // flat vector towards its start. SetPushBreaks cuts the parts of every
  // later transfer also at these flat offsets (ascending, each in (0, n)),
  // so that the end of the vector can leave first; call it after Declare.
  virtual absl::Status SetPushBreaks(std::vector<int64_t> breaks) {
    return absl::OkStatus();
  }
  // Sends the parts of push `seq` that lie wholly at or above flat offset
  // `from` and have not been sent for this seq yet; from = 0 sends the rest
  // and completes the push (as Push would). Calls for one seq come with
  // decreasing `from`, `grads` and `base_versions` unchanged. With `pulled`
  // set, each part goes as a PushPull (PullOptions() semantics) and brings
  // its values after the push into *pulled, whose versions are reset by
  // the seq's first call. This default sends everything at from = 0.
  virtual absl::Status PushFrom(int64_t seq, absl::Span<const float> grads,
                                absl::Span<const int64_t> base_versions,
                                int64_t from, const PulledValues* pulled) {
    if (from > 0) return absl::OkStatus();
    if (pulled == nullptr) return Push(seq, grads, base_versions);
    return PushPull(seq, grads, base_versions, pulled->params,
                    pulled->versions, PullOptions());
  }

  // The end of a piecewise push and the pull after it, as a sync step ends:
  // PushFrom(seq, grads, base_versions, 0, nullptr), then Pull(params,
  // versions, options). An implementation may send a shard's last part as
  // a PushPull whose reply waits for the step and brings the shard's new
  // values (PushRequest.pull_min_version), one round trip instead of two;
  // options.on_chunks is called as Pull calls it. `grads` and `params` must
  // not overlap.
  virtual absl::Status PushRestThenPull(int64_t seq,
                                        absl::Span<const float> grads,
                                        absl::Span<const int64_t> base_versions,
                                        absl::Span<float> params,
                                        std::vector<int64_t>* versions,
                                        const PullOptions& options) {
    absl::Status s = PushFrom(seq, grads, base_versions, 0, nullptr);
    if (!s.ok()) return s;
    return Pull(params, versions, options);
  }

  // A sync push's parts at or after `from`, as PushFrom(seq, grads,
  // base_versions, from, nullptr) sends them, except that a shard whose
  // last part this is may get it as a PushPull whose reply waits for the
  // step (options.min_version) and brings the shard's new values into
  // params/versions (options.on_chunks is called for them): the pull
  // leaves with the gradient instead of at the push's end. Such a call may
  // still be under way when this returns (so that no shard's step waits
  // for another's): until the PushRestThenPull that ends this push (seq),
  // or WaitCarriedPulls, has returned, params, versions and what
  // options.on_chunks uses must stay alive, and only the chunks
  // on_chunks has named may be read. That PushRestThenPull does not pull
  // such a shard again. `grads` and `params` must not overlap. Default:
  // PushFrom.
  virtual absl::Status PushFromCarryingPulls(
      int64_t seq, absl::Span<const float> grads,
      absl::Span<const int64_t> base_versions, int64_t from,
      absl::Span<float> params, std::vector<int64_t>* versions,
      const PullOptions& options) {
    (void)params;
    (void)versions;
    (void)options;
    return PushFrom(seq, grads, base_versions, from, nullptr);
  }

  // Waits for the calls PushFromCarryingPulls left under way (a push that
  // failed before its PushRestThenPull); the first one's error.
  virtual absl::Status WaitCarriedPulls() { return absl::OkStatus(); }

  // Tells every shard this worker has finished (sync/ssp stop waiting).
  virtual absl::Status Leave() = 0;

  // One entry per shard, in shard order.
  virtual absl::StatusOr<std::vector<ShardStats>> Stats() = 0;

  // The map computed by Declare (empty before).
  virtual const ShardMap& shard_map() const = 0;

  // A buffer of the model's flat size (Declare's) that pushes may take
  // their gradient from at no copy: the gRPC client's shared-memory push
  // area, when shards on this host take payloads through it. Null when
  // there is none. Valid until the next Declare; a push reads it until it
  // returns, so nothing else may write it meanwhile.
  virtual float* PushStaging() { return nullptr; }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_PS_CLIENT_H_
