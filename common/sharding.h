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
//  * Except the tensors of ModelLayout::pinned_blocks, placed first: whole
//    (cut only at max_chunk_bytes), each block on a shard of its own when
//    there are enough.
//  * Every chunk covers a contiguous range of the flat parameter vector, which
//    is the concatenation of the tensors in layout order.
//
// A layout comes from the network (DeclareModel) as well as from the model,
// so it is checked against LayoutLimits before anything is built from it:
// every count is bounded, the element arithmetic cannot overflow, and a
// refusal is InvalidArgument naming the limit. Workers and servers check the
// same way, so a client fails before it sends an absurd layout.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(ShardMap map, ComputeShardMap(layout));
//   for (int id : map.shard_chunks[shard]) { const Chunk& c = map.chunks[id]; }
#ifndef DOWNPOUR_COMMON_SHARDING_H_
#define DOWNPOUR_COMMON_SHARDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

// One named float32 tensor of the model.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;

  // The product of the dimensions: exact for a layout that passed
  // ValidateLayout; saturates at INT64_MAX instead of overflowing otherwise.
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
  // Leading blocks of tensors placed before the others: block k (the next
  // pinned_blocks[k] tensors in flat order) goes whole, never spread, to
  // shard k mod num_shards; the rest are then placed as usual around them.
  // A worker that defers a layer's weight gradients pins that layer and the
  // first layer apart (worker/nn/model.h, ModelOptions). Empty: none.
  std::vector<int32_t> pinned_blocks;

  // The sum over tensors; exact for a validated layout, saturating else.
  int64_t NumElements() const;
  bool operator==(const ModelLayout& o) const {
    return tensors == o.tensors && num_shards == o.num_shards &&
           max_chunk_bytes == o.max_chunk_bytes &&
           spread_min_bytes == o.spread_min_bytes &&
           pinned_blocks == o.pinned_blocks;
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

// Bounds on a layout: far above any model this trainer holds, low enough
// that checking a hostile layout and building its map stay cheap, and every
// count and byte size far from int64 overflow. A server takes them from its
// options (ParameterStoreOptions::layout_limits, set from flags); the
// defaults are what every other caller uses.
struct LayoutLimits {
  // Named tensors. Real models have hundreds to a few thousand (a 96-layer
  // transformer about 1,200); each costs its name and at least one chunk.
  int64_t max_tensors = int64_t{1} << 16;
  // Dimensions of one tensor (numpy allows 32 to 64).
  int64_t max_rank = 32;
  // Float32 elements of the whole model, over all shards: 2^32, 16 GiB of
  // values (a shard adds optimizer state and, in sync mode, a buffer per
  // worker). Above any model a CPU parameter-server job trains, and 2^34
  // bytes keep every size computed from it exact. Declaring only costs the
  // map (below); values are allocated only for chunks a client sends.
  int64_t max_total_elements = int64_t{1} << 32;
  // Chunks in the shard map, over all shards: 2^18 covers the largest model
  // above cut into 64 KiB chunks (with the default 1 MiB chunks, 16,384 do).
  // A chunk costs about 200 bytes on the shard that owns it and 40 in every
  // copy of the map, so the map of a hostile layout stays under ~60 MiB.
  int64_t max_chunks = int64_t{1} << 18;
  // Shards a layout may be cut for.
  int32_t max_shards = 1 << 12;
  // The largest max_chunk_bytes: 1 GiB (a chunk travels in one message;
  // the gRPC transport limits messages to far less).
  int64_t max_chunk_bytes = int64_t{1} << 30;
};

// Checks the limits themselves: all positive, max_chunks below 2^31 (chunk
// ids are int32), max_total_elements at most 2^40.
absl::Status ValidateLayoutLimits(const LayoutLimits& limits);

// Validates the layout: S in [1, max_shards]; max_chunk_bytes a multiple of
// 4 in [4, max_chunk_bytes]; 1 to max_tensors tensors with unique non-empty
// names; each of rank <= max_rank with dims >= 0 (0 allowed: an empty
// tensor); at most max_total_elements elements in all (no dimension alone
// above it, so no product overflows); at most max_chunks chunks once cut.
// Nothing is allocated in proportion to a count before that count is
// checked. InvalidArgument naming the tensor and the limit otherwise.
absl::Status ValidateLayout(const ModelLayout& layout,
                            const LayoutLimits& limits = LayoutLimits());

// Validates the layout (ValidateLayout) and computes the map.
absl::StatusOr<ShardMap> ComputeShardMap(
    const ModelLayout& layout, const LayoutLimits& limits = LayoutLimits());

// The first difference between two layouts, for error messages, e.g.
// "tensor 1 'w': shape [8,4] vs [4,8]" or "num_shards 2 vs 3" (values of `a`
// first); empty when they are equal. Long names and shapes are cut short.
std::string LayoutDifference(const ModelLayout& a, const ModelLayout& b);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SHARDING_H_
