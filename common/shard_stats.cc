#include "common/shard_stats.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace downpour {

std::string ShardStatsToJson(const ShardStats& s) {
  std::string rejected;
  for (const auto& [reason, n] : s.rejected) {
    absl::StrAppend(&rejected, rejected.empty() ? "" : ",", "\"", reason,
                    "\":", n);
  }
  const std::string evicted = absl::StrJoin(s.evicted_workers, ",");
  return absl::StrFormat(
      "{\"shard\":%d,\"num_shards\":%d,\"initialized\":%s,\"chunks\":%d,"
      "\"elements\":%d,\"pulls\":%d,\"pushes_applied\":%d,"
      "\"pushes_duplicate\":%d,\"rejected\":{%s},\"staleness_mean\":%.4f,"
      "\"staleness_max\":%d,\"chunk_updates\":%d,\"bytes_pulled\":%d,"
      "\"bytes_pushed\":%d,\"optimizer\":\"%s\",\"mode\":\"%s\","
      "\"staleness_p50\":%d,\"staleness_p99\":%d,\"dropped_stale\":%d,"
      "\"steps\":%d,\"ssp_max_lead\":%d,\"evicted_workers\":[%s],\"aborted\":%s}",
      s.shard_index, s.num_shards, s.initialized ? "true" : "false",
      s.num_chunks, s.num_elements, s.pulls, s.pushes_applied,
      s.pushes_duplicate, rejected, s.staleness_mean, s.staleness_max,
      s.total_chunk_updates, s.bytes_pulled, s.bytes_pushed, s.optimizer,
      s.mode, s.staleness_p50, s.staleness_p99, s.dropped_stale, s.steps, s.ssp_max_lead,
      evicted, s.aborted.empty() ? "false" : "true");
}

}  // namespace downpour
