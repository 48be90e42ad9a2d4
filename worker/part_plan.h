// File: worker/part_plan.h
//
// How the gRPC parameter client cuts a transfer of the whole model into
// calls: each shard's chunks, in order, are grouped into parts of at most
// `part_bytes` (a larger chunk is a part of its own), and a shard's parts
// are dealt round-robin over its connections. Every Declare, Pull, Push and
// PushPull sends one call per part.
//
//   std::vector<Part> parts = PlanParts(map, /*part_bytes=*/1 << 20,
//                                       /*connections=*/2);
//   for (const Part& p : parts) Send(p.shard, p.conn, p.chunk_ids);
//
// Thread-safety: a pure function.
#ifndef DOWNPOUR_WORKER_PART_PLAN_H_
#define DOWNPOUR_WORKER_PART_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/sharding.h"

namespace downpour {

// A group of one shard's chunks moved by one call.
struct Part {
  int shard = 0;
  int conn = 0;   // Which of the shard's connections carries it.
  int index = 0;  // Part number within the shard.
  int count = 1;  // Parts of the shard.
  std::vector<int32_t> chunk_ids;
};

// Groups each shard's chunks (4 bytes per value), in shard order and in
// their order within the shard, into parts of at most part_bytes (a larger
// chunk alone); a shard without chunks gets one empty part, so that it still
// sees every push and pull. Part i of a shard goes on connection
// i % connections (connections >= 1). A part also never holds chunks on
// both sides of a break (flat offsets, ascending; chunk boundaries), so that
// the gradient above a break can be pushed before the rest
// (ParameterClient::PushFrom).
std::vector<Part> PlanParts(const ShardMap& map, int64_t part_bytes,
                            int connections,
                            absl::Span<const int64_t> breaks = {});

// The smallest flat offset of the part's chunks.
int64_t PartBegin(const ShardMap& map, const Part& p);

// How a shard's values come back at the end of a sync push
// (ParameterClient::PushRestThenPull): with its last part (a PushPull whose
// reply waits for the step), by a pull sent with the last parts, or by a
// pull sent after them.
enum class PushEndPull { kCarried, kNow, kAfter };

struct PushEnd {
  // Per shard.
  std::vector<PushEndPull> how;
  // Per shard: its pull part (an index into the pull's parts) when it has
  // exactly one, else -1.
  std::vector<int> pull_part;
};

// Plans the end of a push over `parts` (sent[i]: part i went already,
// acknowledged by server incarnation acked_by[i]; current[s]: shard s's
// incarnation as last seen, 0 unknown) followed by a pull over
// `pull_parts`. A shard whose sent parts its current process acknowledged
// all: carried when it has one part left and one pull part, pulled now when
// it has none left. Every other shard, and every shard when the pull waits
// for no step (!waits_for_step), is pulled after.
PushEnd PlanPushEnd(absl::Span<const Part> parts,
                    absl::Span<const Part> pull_parts,
                    const std::vector<bool>& sent,
                    absl::Span<const uint64_t> acked_by,
                    absl::Span<const uint64_t> current, bool waits_for_step);

// The lane (connection across all shards) of part p: shard * connections +
// conn.
inline int LaneOf(const Part& p, int connections) {
  return p.shard * connections + p.conn;
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_PART_PLAN_H_
