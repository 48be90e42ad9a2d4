#include "common/sharding.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace downpour {

int64_t TensorSpec::NumElements() const {
  // A zero dimension makes the tensor empty whatever the others are: check it
  // first, or [2^32, 2^32, 0] would saturate to INT64_MAX below while
  // ValidateLayout counts it as 0 elements (found by layout_fuzzer).
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  }
  return n;
}

int64_t ModelLayout::NumElements() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) {
    if (__builtin_add_overflow(n, t.NumElements(), &n)) return INT64_MAX;
  }
  return n;
}

namespace {

// Tensor names and shapes in messages, cut short: a refused layout may carry
// names and ranks of any size.
std::string Quoted(const std::string& name) {
  constexpr size_t kMaxShown = 64;
  if (name.size() <= kMaxShown) return absl::StrCat("'", name, "'");
  return absl::StrCat("'", name.substr(0, kMaxShown), "...' (",
                      name.size(), " bytes)");
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  constexpr size_t kMaxShown = 8;
  if (shape.size() <= kMaxShown) {
    return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
  }
  return absl::StrCat(
      "[",
      absl::StrJoin(shape.begin(), shape.begin() + kMaxShown, ","),
      ",...] (rank ", shape.size(), ")");
}

// How many chunks a tensor of n elements is cut into (see the file comment).
// n <= max_total_elements and max_chunk_bytes are validated: no overflow.
// A pinned tensor (ModelLayout::pinned_blocks) is not spread.
int64_t PiecesOf(int64_t n, const ModelLayout& layout, bool pinned) {
  const int64_t max_chunk_elems = layout.max_chunk_bytes / 4;
  // Ceiling division without n + max_chunk_elems - 1, which overflows when
  // max_chunk_bytes is near INT64_MAX (found by layout_fuzzer).
  int64_t pieces = n / max_chunk_elems + (n % max_chunk_elems != 0 ? 1 : 0);
  if (!pinned && n * 4 > layout.spread_min_bytes) {
    pieces = std::max<int64_t>(pieces, layout.num_shards);
  }
  return std::max<int64_t>(1, std::min<int64_t>(pieces, std::max<int64_t>(n, 1)));
}

// How many leading tensors the pinned blocks cover (validated: at most all).
int64_t PinnedTensors(const ModelLayout& layout) {
  int64_t n = 0;
  for (const int32_t b : layout.pinned_blocks) n += b;
  return n;
}

}  // namespace

absl::Status ValidateLayoutLimits(const LayoutLimits& l) {
  if (l.max_tensors < 1 || l.max_rank < 0 || l.max_total_elements < 1 ||
      l.max_total_elements > (int64_t{1} << 40) || l.max_chunks < 1 ||
      l.max_chunks > INT32_MAX || l.max_shards < 1 || l.max_chunk_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout limits must be positive, with max_total_elements <= 2^40 and "
        "max_chunks < 2^31; got max_tensors ", l.max_tensors, ", max_rank ",
        l.max_rank, ", max_total_elements ", l.max_total_elements,
        ", max_chunks ", l.max_chunks, ", max_shards ", l.max_shards,
        ", max_chunk_bytes ", l.max_chunk_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayout(const ModelLayout& layout,
                            const LayoutLimits& limits) {
  if (absl::Status s = ValidateLayoutLimits(limits); !s.ok()) return s;
  if (layout.num_shards < 1 || layout.num_shards > limits.max_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be in [1, max_shards = ",
                     limits.max_shards, "], got ", layout.num_shards));
  }
  if (layout.max_chunk_bytes < 4 || layout.max_chunk_bytes % 4 != 0 ||
      layout.max_chunk_bytes > limits.max_chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_bytes must be a multiple of 4 (whole float32 values) in "
        "[4, ", limits.max_chunk_bytes, "], got ", layout.max_chunk_bytes));
  }
  if (layout.tensors.empty()) {
    return absl::InvalidArgumentError("layout has no tensors");
  }
  {
    int64_t pinned = 0;
    for (const int32_t b : layout.pinned_blocks) {
      if (b < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pinned_blocks: a block has ", b, " tensors, not at least 1"));
      }
      pinned += b;
      if (pinned > static_cast<int64_t>(layout.tensors.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pinned_blocks cover more than the layout's ",
            layout.tensors.size(), " tensors"));
      }
    }
  }
  if (static_cast<int64_t>(layout.tensors.size()) > limits.max_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout has ", layout.tensors.size(),
                     " tensors, more than max_tensors = ", limits.max_tensors));
  }
  // Element counts, checked before anything else is done with them: no
  // dimension exceeds the total limit, so a product of two of them cannot
  // overflow before it is compared with the limit.
  const int64_t max_elems = limits.max_total_elements;
  int64_t total = 0, chunks = 0;
  const int64_t pinned_tensors = PinnedTensors(layout);
  int64_t tensor_index = 0;
  for (const TensorSpec& t : layout.tensors) {
    if (t.name.empty()) {
      return absl::InvalidArgumentError("layout has a tensor with no name");
    }
    if (static_cast<int64_t>(t.shape.size()) > limits.max_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", Quoted(t.name), " has ", t.shape.size(),
          " dimensions, more than max_rank = ", limits.max_rank));
    }
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", Quoted(t.name), " has a negative dimension ", d));
      }
      if (d > max_elems) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", Quoted(t.name), " has dimension ", d,
            ", above max_total_elements = ", max_elems));
      }
    }
    for (int64_t d : t.shape) {
      if (d == 0) {
        n = 0;
        break;
      }
    }
    for (int64_t d : t.shape) {
      if (n == 0) break;
      if (n > max_elems / d) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", Quoted(t.name), " of shape ", ShapeString(t.shape),
            " has more than max_total_elements = ", max_elems,
            " float32 elements"));
      }
      n *= d;
    }
    total += n;  // Both <= max_elems <= 2^40: no overflow.
    if (total > max_elems) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout has more than max_total_elements = ", max_elems,
          " float32 elements (reached at tensor ", Quoted(t.name), " of shape ",
          ShapeString(t.shape), ")"));
    }
    chunks += PiecesOf(n, layout, tensor_index < pinned_tensors);
    ++tensor_index;
    if (chunks > limits.max_chunks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout cuts into more than max_chunks = ", limits.max_chunks,
          " chunks (reached at tensor ", Quoted(t.name), " with max_chunk_bytes ",
          layout.max_chunk_bytes, "): use a larger max_chunk_bytes"));
    }
  }
  // The names last: the set grows with the (now bounded) tensor count.
  absl::flat_hash_set<absl::string_view> names;
  names.reserve(layout.tensors.size());
  for (const TensorSpec& t : layout.tensors) {
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout names tensor ", Quoted(t.name), " twice"));
    }
  }
  return absl::OkStatus();
}

std::string LayoutDifference(const ModelLayout& a, const ModelLayout& b) {
  if (a.num_shards != b.num_shards) {
    return absl::StrCat("num_shards ", a.num_shards, " vs ", b.num_shards);
  }
  if (a.max_chunk_bytes != b.max_chunk_bytes) {
    return absl::StrCat("max_chunk_bytes ", a.max_chunk_bytes, " vs ",
                        b.max_chunk_bytes);
  }
  if (a.spread_min_bytes != b.spread_min_bytes) {
    return absl::StrCat("spread_min_bytes ", a.spread_min_bytes, " vs ",
                        b.spread_min_bytes);
  }
  if (a.pinned_blocks != b.pinned_blocks) {
    return absl::StrCat("pinned_blocks [",
                        absl::StrJoin(a.pinned_blocks, ","), "] vs [",
                        absl::StrJoin(b.pinned_blocks, ","), "]");
  }
  const size_t n = std::min(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& x = a.tensors[i];
    const TensorSpec& y = b.tensors[i];
    if (x.name != y.name) {
      return absl::StrCat("tensor ", i, ": name ", Quoted(x.name), " vs ",
                          Quoted(y.name));
    }
    if (x.shape != y.shape) {
      return absl::StrCat("tensor ", i, " ", Quoted(x.name), ": shape ",
                          ShapeString(x.shape), " vs ", ShapeString(y.shape));
    }
  }
  if (a.tensors.size() != b.tensors.size()) {
    return absl::StrCat(a.tensors.size(), " tensors vs ", b.tensors.size());
  }
  return "";
}

absl::StatusOr<ShardMap> ComputeShardMap(const ModelLayout& layout,
                                         const LayoutLimits& limits) {
  // Every count below is bounded once the layout is valid.
  if (absl::Status s = ValidateLayout(layout, limits); !s.ok()) return s;
  const int num_shards = layout.num_shards;

  ShardMap map;
  const int64_t pinned_tensors = PinnedTensors(layout);
  // The pinned block of each pinned tensor.
  std::vector<int32_t> block_of;
  for (int32_t b = 0; b < static_cast<int32_t>(layout.pinned_blocks.size());
       ++b) {
    block_of.insert(block_of.end(), layout.pinned_blocks[b], b);
  }
  int64_t num_chunks = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(layout.tensors.size()); ++t) {
    num_chunks +=
        PiecesOf(layout.tensors[t].NumElements(), layout, t < pinned_tensors);
  }
  map.chunks.reserve(num_chunks);
  int64_t offset = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(layout.tensors.size()); ++t) {
    const int64_t n = layout.tensors[t].NumElements();
    const int64_t pieces = PiecesOf(n, layout, t < pinned_tensors);
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
  const auto place = [&map](int32_t id, int shard) {
    map.chunks[id].shard = shard;
    map.shard_elements[shard] += map.chunks[id].num_elements;
    map.shard_chunks[shard].push_back(id);
  };
  for (const Chunk& c : map.chunks) {
    if (c.tensor_index < pinned_tensors) {
      place(c.id, block_of[c.tensor_index] % num_shards);
    }
  }
  // The lightest shard, lowest index first among equals: a heap of
  // (elements, shard) keeps this O(chunks * log(shards)).
  using Load = std::pair<int64_t, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> lightest;
  for (int k = 0; k < num_shards; ++k) {
    lightest.push({map.shard_elements[k], k});
  }
  for (int32_t id : order) {
    if (map.chunks[id].tensor_index < pinned_tensors) continue;
    const int shard = lightest.top().second;
    lightest.pop();
    map.chunks[id].shard = shard;
    map.shard_elements[shard] += map.chunks[id].num_elements;
    map.shard_chunks[shard].push_back(id);
    lightest.push({map.shard_elements[shard], shard});
  }
  for (auto& ids : map.shard_chunks) std::sort(ids.begin(), ids.end());
  return map;
}

}  // namespace downpour
