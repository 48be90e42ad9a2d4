// File: server/shared_payloads.h
//
// A shard's side of payloads that travel through a worker's shared memory
// (rpc/shared_memory.h): which requests may use it, reading a push's
// gradients in the region, and writing a reply's values into it. The
// service (server/grpc_service.cc) calls these around the store, as it
// reads and writes gRPC slices otherwise.
//
//   SharedPayloads shared(store);
//   DP_ASSIGN_OR_RETURN(auto region, shared.Region(ctx.peer(), ref, false));
//   DP_RETURN_IF_ERROR(shared.TakePush(*region, ref, reply, &msg, &pieces));
//   ... store->Push(...) from `pieces` ...
//   DP_RETURN_IF_ERROR(shared.WriteReply(*region, ref.reply_offset, views));
//
// Thread-safety: thread-safe.
#ifndef DOWNPOUR_SERVER_SHARED_PAYLOADS_H_
#define DOWNPOUR_SERVER_SHARED_PAYLOADS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rpc/shared_memory.h"
#include "rpc/wire.h"
#include "server/parameter_store.h"

namespace downpour {

class SharedPayloads {
 public:
  explicit SharedPayloads(ParameterStore* store) : store_(store) {}

  // The region `ref` names, mapped, for a request from gRPC peer `peer`.
  // FailedPrecondition when this shard takes no shared memory from it: a
  // peer off the loopback, a shard with a standby (whose forwarded requests
  // must carry their payloads), a model not declared yet, a region not of
  // the model's size (SharedRegion::Fits), or one that cannot be mapped.
  absl::StatusOr<std::shared_ptr<MappedRegion>> Region(
      absl::string_view peer, const wire::SharedRef& ref, bool has_standby);

  // Appends to *pieces the payload of each of msg's chunks in the region
  // (float32, at 4 * its flat offset in the push area) and points the
  // chunk's data at it: from then on the push reads as one that carried its
  // payloads, without a copy; the caller keeps `region` mapped until the
  // store has applied them. The worker leaves the push area alone until
  // its call is answered, with one exception: a retry of a part still
  // being applied is answered at once (push_dedup.h), so an async worker
  // whose call timed out may write its next gradient there while the first
  // call still reads it, and the shard then applies a mix of the two. A
  // client writing the area meanwhile cannot make the optimizers read a
  // NaN or Inf (server/optimizer.h), and sizes and places are the shard's
  // own. InvalidArgument for a chunk with
  // inline data or another encoding, or named twice; a chunk that is not
  // this shard's keeps an empty payload (the store refuses it). With
  // `reply` (a PushPull that
  // returns the pushed chunks), their places in the reply area are checked
  // too, so that a reply that could not be written is refused before the
  // push is applied. FailedPrecondition before the model is declared.
  absl::Status TakePush(const MappedRegion& region, const wire::SharedRef& ref,
                        bool reply, wire::PushMessage* msg,
                        wire::Pieces* pieces);

  // Writes each chunk's float32 values at 4 * its flat offset from
  // reply_offset.
  absl::Status WriteReply(const MappedRegion& region, uint64_t reply_offset,
                          const std::vector<ChunkView>& chunks);

  // This shard's index when `region` has a call block for each of the
  // model's shards (rpc/shared_calls.h); FailedPrecondition otherwise.
  absl::StatusOr<int> CallShard(const MappedRegion& region);

 private:
  // Flat offset and element count of each chunk of the model, by id;
  // num_elements -1 for another shard's chunk.
  struct Place {
    int64_t flat_offset = 0;
    int64_t num_elements = -1;
  };
  struct Model {
    std::vector<Place> places;
    int64_t total_elements = 0;
    int shard = 0;
    int num_shards = 0;
  };
  absl::StatusOr<std::shared_ptr<const Model>> GetModel();

  ParameterStore* const store_;  // Not owned.
  SharedRegionCache regions_;
  absl::Mutex mu_;
  // Set once the model is declared; a declared layout never changes.
  std::shared_ptr<const Model> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SHARED_PAYLOADS_H_
