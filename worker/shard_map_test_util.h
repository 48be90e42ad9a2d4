// File: worker/shard_map_test_util.h
//
// Test-only: a ShardMap built from chunk sizes, and parts named by their
// shard, for the tests of the units that cut a layout into parts
// (part_plan, part_messages) and track them (shard_incarnations).
#ifndef DOWNPOUR_WORKER_SHARD_MAP_TEST_UTIL_H_
#define DOWNPOUR_WORKER_SHARD_MAP_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "common/sharding.h"
#include "worker/part_plan.h"

namespace downpour {

// A map whose shard s holds chunks of sizes[s][k] floats, ids in order.
inline ShardMap MapOf(const std::vector<std::vector<int64_t>>& sizes) {
  ShardMap m;
  m.shard_chunks.resize(sizes.size());
  m.shard_elements.resize(sizes.size());
  for (int s = 0; s < static_cast<int>(sizes.size()); ++s) {
    for (int64_t n : sizes[s]) {
      Chunk c;
      c.id = static_cast<int32_t>(m.chunks.size());
      c.flat_offset = m.total_elements;
      c.num_elements = n;
      c.shard = s;
      m.chunks.push_back(c);
      m.shard_chunks[s].push_back(c.id);
      m.shard_elements[s] += n;
      m.total_elements += n;
    }
  }
  return m;
}

// Parts with only their shard set, one per entry of `shards`.
inline std::vector<Part> PartsOfShards(const std::vector<int>& shards) {
  std::vector<Part> parts;
  for (int s : shards) {
    Part p;
    p.shard = s;
    parts.push_back(p);
  }
  return parts;
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SHARD_MAP_TEST_UTIL_H_
