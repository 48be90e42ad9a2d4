// File: worker/chunk_io.h
//
// Helpers shared by the ParameterClient implementations: checking a pulled
// chunk against the shard map and copying it into the flat vector.
#ifndef DOWNPOUR_WORKER_CHUNK_IO_H_
#define DOWNPOUR_WORKER_CHUNK_IO_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/sharding.h"

namespace downpour {

// Copies one pulled chunk of `shard` into `params`, recording its version.
// Errors name the shard when the chunk is not one of its own or has the
// wrong size (a server that disagrees about the layout).
inline absl::Status StoreChunk(const ShardMap& map, int shard, int32_t chunk_id,
                               int64_t version, const void* data,
                               int64_t num_bytes, absl::Span<float> params,
                               std::vector<int64_t>* versions) {
  if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(map.chunks.size()) ||
      map.chunks[chunk_id].shard != shard) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " returned chunk ", chunk_id, " that it does not own"));
  }
  const Chunk& c = map.chunks[chunk_id];
  if (num_bytes != c.num_elements * 4 ||
      c.flat_offset + c.num_elements > static_cast<int64_t>(params.size())) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " returned ", num_bytes, " bytes for chunk ", chunk_id,
        ", expected ", c.num_elements * 4));
  }
  if (num_bytes > 0) std::memcpy(params.data() + c.flat_offset, data, num_bytes);
  (*versions)[chunk_id] = version;
  return absl::OkStatus();
}

inline absl::Status CheckFlatSize(const ShardMap& map, int64_t size,
                                  const char* what) {
  if (map.chunks.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " before Declare"));
  }
  if (size != map.total_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": flat vector has ", size, " floats, the model has ",
        map.total_elements));
  }
  return absl::OkStatus();
}

// InvalidArgument when the gradient and the parameters share memory.
inline absl::Status CheckApart(absl::Span<const float> grads,
                               absl::Span<const float> params,
                               const char* what) {
  if (grads.data() < params.data() + params.size() &&
      params.data() < grads.data() + grads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": grads and params overlap"));
  }
  return absl::OkStatus();
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_CHUNK_IO_H_
