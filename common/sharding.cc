#include "common/sharding.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelLayout::NumElements() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) n += t.NumElements();
  return n;
}

namespace {

absl::Status ValidateLayout(const ModelLayout& layout) {
  if (layout.num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be >= 1, got ", layout.num_shards));
  }
  if (layout.max_chunk_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_bytes must be >= 4, got ", layout.max_chunk_bytes));
  }
  if (layout.tensors.empty()) {
    return absl::InvalidArgumentError("layout has no tensors");
  }
  std::set<std::string> names;
  for (const TensorSpec& t : layout.tensors) {
    if (t.name.empty()) {
      return absl::InvalidArgumentError("layout has a tensor with no name");
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout names tensor '", t.name, "' twice"));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has a negative dimension ", d));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardMap> ComputeShardMap(const ModelLayout& layout) {
  if (absl::Status s = ValidateLayout(layout); !s.ok()) return s;
  const int64_t max_chunk_elems = layout.max_chunk_bytes / 4;
  const int num_shards = layout.num_shards;

  ShardMap map;
  int64_t offset = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(layout.tensors.size()); ++t) {
    const int64_t n = layout.tensors[t].NumElements();
    int64_t pieces = (n + max_chunk_elems - 1) / max_chunk_elems;
    if (n * 4 > layout.spread_min_bytes) {
      pieces = std::max<int64_t>(pieces, num_shards);
    }
    pieces = std::max<int64_t>(1, std::min<int64_t>(pieces, std::max<int64_t>(n, 1)));
    // Near-equal pieces: the first (n % pieces) get one extra element.
    const int64_t base = n / pieces, extra = n % pieces;
    for (int64_t p = 0; p < pieces; ++p) {
      Chunk c;
      c.id = static_cast<int32_t>(map.chunks.size());
      c.tensor_index = t;
      c.flat_offset = offset;
      c.num_elements = base + (p < extra ? 1 : 0);
      offset += c.num_elements;
      map.chunks.push_back(c);
    }
  }
  map.total_elements = offset;

  // Longest-processing-time assignment: largest chunk first to the lightest
  // shard. Ties break on chunk id and shard index, so the result depends only
  // on the layout.
  std::vector<int32_t> order(map.chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return map.chunks[a].num_elements > map.chunks[b].num_elements;
  });
  map.shard_elements.assign(num_shards, 0);
  map.shard_chunks.assign(num_shards, {});
  for (int32_t id : order) {
    const int shard = static_cast<int>(
        std::min_element(map.shard_elements.begin(), map.shard_elements.end()) -
        map.shard_elements.begin());
    map.chunks[id].shard = shard;
    map.shard_elements[shard] += map.chunks[id].num_elements;
    map.shard_chunks[shard].push_back(id);
  }
  for (auto& ids : map.shard_chunks) std::sort(ids.begin(), ids.end());
  return map;
}

}  // namespace downpour
