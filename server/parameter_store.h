// File: server/parameter_store.h
//
// One parameter-server shard's state and logic, with no RPC in it: the chunks
// this shard owns (values, version, optimizer state), declaration of the
// model layout, pulls and pushes. The gRPC service (server/grpc_service.h) is
// a thin adapter over it; tests and in-process clients call it directly.
//
// Async (Downpour) semantics: each push is applied on arrival. Every chunk
// has its own lock, so pushes to different chunks never wait on each other.
// A push carries (worker_id, seq); a push whose seq is not above the last one
// applied for that worker is a retry and is acknowledged without being
// applied, so no update is lost or applied twice. A push is validated
// completely (known chunks owned by this shard, exact sizes, finite values)
// before anything is changed: a bad push changes nothing.
//
// Usage:
//   ParameterStoreOptions o; o.shard_index = 0; o.num_shards = 2;
//   DP_ASSIGN_OR_RETURN(auto store, ParameterStore::Create(o));
//   DP_ASSIGN_OR_RETURN(bool fresh, store->Declare(layout, initial_chunks));
//   store->Pull({}, [&](const ChunkView& c) { ... });
//   DP_ASSIGN_OR_RETURN(PushResult r, store->Push(worker, seq, grads));
//
// Thread-safety: all methods may be called concurrently.
#ifndef DOWNPOUR_SERVER_PARAMETER_STORE_H_
#define DOWNPOUR_SERVER_PARAMETER_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/shard_stats.h"
#include "common/sharding.h"
#include "server/optimizer.h"

namespace downpour {

struct ParameterStoreOptions {
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  OptimizerOptions optimizer;
};

// Raw little-endian float32 bytes of one chunk, as they arrive off the wire.
struct ChunkBytes {
  int32_t chunk_id = 0;
  // For pushes: the version the gradient was computed from.
  int64_t base_version = 0;
  const void* data = nullptr;
  int64_t num_bytes = 0;
};

// What a pull sink sees: valid only during the callback, which runs under the
// chunk's lock (copy the data out, do nothing slow).
struct ChunkView {
  int32_t chunk_id = 0;
  int64_t version = 0;
  const float* data = nullptr;
  int64_t num_elements = 0;
};

struct PushResult {
  bool duplicate = false;
  // Version of each pushed chunk after the push, in request order (empty for
  // a duplicate).
  std::vector<int64_t> versions;
};

class ParameterStore {
 public:
  static absl::StatusOr<std::unique_ptr<ParameterStore>> Create(
      const ParameterStoreOptions& options);
  virtual ~ParameterStore() = default;

  // Declares the layout. The first successful call initializes the shard from
  // `initial`, which must hold exactly this shard's chunks, each with its full
  // size and finite values; returns true. Later calls with an identical
  // layout return false and ignore `initial`; a different layout, or one cut
  // for another number of shards, is InvalidArgument.
  virtual absl::StatusOr<bool> Declare(const ModelLayout& layout,
                                       absl::Span<const ChunkBytes> initial) = 0;

  // Calls `sink` once per requested chunk (all owned chunks when `chunk_ids`
  // is empty), in request order, each with values and the matching version.
  // FailedPrecondition before initialization; InvalidArgument for a chunk
  // this shard does not own (nothing is read then).
  virtual absl::Status Pull(absl::Span<const int32_t> chunk_ids,
                            const std::function<void(const ChunkView&)>& sink) = 0;

  // Applies gradients with the server optimizer (see the file comment).
  // worker_id >= 0, seq >= 1, each chunk at most once per push.
  virtual absl::StatusOr<PushResult> Push(int32_t worker_id, int64_t seq,
                                          absl::Span<const ChunkBytes> grads) = 0;

  virtual ShardStats Stats() const = 0;

  // The shard map of the declared layout; FailedPrecondition before.
  virtual absl::StatusOr<ShardMap> shard_map() const = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_PARAMETER_STORE_H_
