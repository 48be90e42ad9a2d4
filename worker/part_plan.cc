#include "worker/part_plan.h"

#include <algorithm>

namespace downpour {

std::vector<Part> PlanParts(const ShardMap& map, int64_t part_bytes,
                            int connections,
                            absl::Span<const int64_t> breaks) {
  // Chunks between the same two breaks share a bucket.
  const auto bucket = [&](int32_t id) {
    return std::upper_bound(breaks.begin(), breaks.end(),
                            map.chunks[id].flat_offset) -
           breaks.begin();
  };
  std::vector<Part> parts;
  for (int s = 0; s < static_cast<int>(map.shard_chunks.size()); ++s) {
    const size_t first = parts.size();
    Part cur;
    cur.shard = s;
    int64_t bytes = 0;
    for (int32_t id : map.shard_chunks[s]) {
      const int64_t b = map.chunks[id].num_elements * 4;
      if (!cur.chunk_ids.empty() &&
          (bytes + b > part_bytes || bucket(id) != bucket(cur.chunk_ids[0]))) {
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

int64_t PartBegin(const ShardMap& map, const Part& p) {
  int64_t begin = map.total_elements;
  for (int32_t id : p.chunk_ids) {
    begin = std::min(begin, map.chunks[id].flat_offset);
  }
  return begin;
}

PushEnd PlanPushEnd(absl::Span<const Part> parts,
                    absl::Span<const Part> pull_parts,
                    const std::vector<bool>& sent,
                    absl::Span<const uint64_t> acked_by,
                    absl::Span<const uint64_t> current, bool waits_for_step) {
  const int shards = static_cast<int>(current.size());
  PushEnd e;
  e.how.assign(shards, PushEndPull::kAfter);
  e.pull_part.assign(shards, -1);
  std::vector<int> pulls(shards, 0), left(shards, 0);
  for (size_t j = 0; j < pull_parts.size(); ++j) {
    ++pulls[pull_parts[j].shard];
    e.pull_part[pull_parts[j].shard] = static_cast<int>(j);
  }
  std::vector<bool> acked_here(shards, true);
  for (size_t i = 0; i < parts.size(); ++i) {
    const int s = parts[i].shard;
    if (!sent[i]) {
      ++left[s];
    } else if (acked_by[i] != current[s]) {
      acked_here[s] = false;
    }
  }
  for (int s = 0; s < shards; ++s) {
    if (pulls[s] != 1) e.pull_part[s] = -1;
    if (!waits_for_step || !acked_here[s] || current[s] == 0) continue;
    if (left[s] == 0) {
      e.how[s] = PushEndPull::kNow;
    } else if (left[s] == 1 && pulls[s] == 1) {
      e.how[s] = PushEndPull::kCarried;
    }
  }
  return e;
}

}  // namespace downpour
