// File: common/shard_stats.h
//
// Counters one parameter-server shard reports (the C++ twin of the proto's
// StatsResponse), shared by the store, the RPC adapter and the clients.
#ifndef DOWNPOUR_COMMON_SHARD_STATS_H_
#define DOWNPOUR_COMMON_SHARD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace downpour {

struct ShardStats {
  int32_t shard_index = 0;
  int32_t num_shards = 0;
  bool initialized = false;
  int32_t num_chunks = 0;
  int64_t num_elements = 0;
  int64_t pulls = 0;
  int64_t pushes_applied = 0;
  int64_t pushes_duplicate = 0;
  // Refused requests by reason: "unknown_chunk", "wrong_size", "non_finite",
  // "not_initialized", "layout_mismatch", "bad_request".
  std::map<std::string, int64_t> rejected;
  double staleness_mean = 0;
  int64_t staleness_max = 0;
  int64_t total_chunk_updates = 0;
  int64_t bytes_pulled = 0;
  int64_t bytes_pushed = 0;
  std::string optimizer;
  std::string mode;
  int64_t staleness_p50 = 0;
  int64_t staleness_p99 = 0;
  int64_t dropped_stale = 0;
  int64_t steps = 0;
  // Ssp: the largest (worker clock - slowest active clock) a pull was
  // answered at; never above the staleness bound.
  int64_t ssp_max_lead = 0;
  std::vector<int32_t> evicted_workers;
  std::string aborted;
};

// One-line JSON rendering, e.g. for logs and the launcher's summary.
std::string ShardStatsToJson(const ShardStats& s);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SHARD_STATS_H_
