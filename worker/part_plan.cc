#include "worker/part_plan.h"

namespace downpour {

std::vector<Part> PlanParts(const ShardMap& map, int64_t part_bytes,
                            int connections) {
  std::vector<Part> parts;
  for (int s = 0; s < static_cast<int>(map.shard_chunks.size()); ++s) {
    const size_t first = parts.size();
    Part cur;
    cur.shard = s;
    int64_t bytes = 0;
    for (int32_t id : map.shard_chunks[s]) {
      const int64_t b = map.chunks[id].num_elements * 4;
      if (!cur.chunk_ids.empty() && bytes + b > part_bytes) {
        parts.push_back(cur);
        cur.chunk_ids.clear();
        bytes = 0;
      }
      cur.chunk_ids.push_back(id);
      bytes += b;
    }
    parts.push_back(cur);
    const int count = static_cast<int>(parts.size() - first);
    for (int i = 0; i < count; ++i) {
      parts[first + i].index = i;
      parts[first + i].count = count;
      parts[first + i].conn = i % connections;
    }
  }
  return parts;
}

}  // namespace downpour
