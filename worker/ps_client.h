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
  // Tells every shard this worker has finished (sync/ssp stop waiting).
  virtual absl::Status Leave() = 0;

  // One entry per shard, in shard order.
  virtual absl::StatusOr<std::vector<ShardStats>> Stats() = 0;

  // The map computed by Declare (empty before).
  virtual const ShardMap& shard_map() const = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_PS_CLIENT_H_
