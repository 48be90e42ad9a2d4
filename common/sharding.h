// File: common/sharding.h
//
// How a model's named tensors are cut into chunks and spread over S
// parameter-server shards. The map is a pure function of (layout, S,
// max_chunk_bytes), so every worker and every server derives the same one
// without talking to each other.
//
// Rules:
//  * A tensor of more than `spread_min_bytes` is cut into
//    max(S, ceil(bytes / max_chunk_bytes)) near-equal chunks, so large tensors
//    are spread over every shard and no chunk exceeds max_chunk_bytes.
//  * Smaller tensors stay whole (one chunk each) unless they exceed
//    max_chunk_bytes.
//  * Chunks are assigned largest first to the shard holding the fewest bytes
//    (ties: lower chunk id, then lower shard index): balanced and deterministic.
//  * Every chunk covers a contiguous range of the flat parameter vector, which
//    is the concatenation of the tensors in layout order.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(ShardMap map, ComputeShardMap(layout));
//   for (int id : map.shard_chunks[shard]) { const Chunk& c = map.chunks[id]; }
#ifndef DOWNPOUR_COMMON_SHARDING_H_
#define DOWNPOUR_COMMON_SHARDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

// One named float32 tensor of the model.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;

  int64_t NumElements() const;
  bool operator==(const TensorSpec& o) const {
    return name == o.name && shape == o.shape;
  }
};

// The model layout and how it is cut. Identical on every process of a job.
struct ModelLayout {
  std::vector<TensorSpec> tensors;
  int32_t num_shards = 1;
  int64_t max_chunk_bytes = 1 << 20;
  // Tensors above this size are split over all shards.
  int64_t spread_min_bytes = 64 << 10;

  int64_t NumElements() const;
  bool operator==(const ModelLayout& o) const {
    return tensors == o.tensors && num_shards == o.num_shards &&
           max_chunk_bytes == o.max_chunk_bytes &&
           spread_min_bytes == o.spread_min_bytes;
  }
  bool operator!=(const ModelLayout& o) const { return !(*this == o); }
};

// A contiguous piece of one tensor.
struct Chunk {
  int32_t id = 0;
  int32_t tensor_index = 0;
  // Offset in the flat parameter vector and length, in float32 elements.
  int64_t flat_offset = 0;
  int64_t num_elements = 0;
  int32_t shard = 0;
};

struct ShardMap {
  // Indexed by chunk id; ordered by (tensor, offset).
  std::vector<Chunk> chunks;
  // shard_chunks[s] lists the chunk ids of shard s in increasing order.
  std::vector<std::vector<int32_t>> shard_chunks;
  // Float32 elements held by each shard.
  std::vector<int64_t> shard_elements;
  int64_t total_elements = 0;
};

// Validates the layout (unique non-empty names, non-negative dims, S >= 1,
// max_chunk_bytes >= 4) and computes the map.
absl::StatusOr<ShardMap> ComputeShardMap(const ModelLayout& layout);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SHARDING_H_
