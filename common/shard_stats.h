// File: common/shard_stats.h
//
// Counters one parameter-server shard reports (the C++ twin of the proto's
// StatsResponse), shared by the store, the RPC adapter and the clients.
//
// The fields are listed once, in DOWNPOUR_SHARD_STATS_FIELDS below: the
// struct, its JSON rendering (ShardStatsToJson) and both proto conversions
// (rpc/rpc_convert.cc) are generated from that list, so a new counter is one
// line here plus its field in proto/parameter_server.proto (a test checks
// that the two lists agree).
//
// Thread-safety: a plain value type.
#ifndef DOWNPOUR_COMMON_SHARD_STATS_H_
#define DOWNPOUR_COMMON_SHARD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace downpour {

// X(type, name, json_key, kind) for each field, in JSON order. `name` is the
// member and the StatsResponse field; `kind` says how it is rendered:
//   Number  an integer;           Bool   true/false;
//   Mean    a double, "%.4f";     Text   a quoted string;
//   Counts  {"reason":n,...};     Ids    [a,b,...];
//   Flag    a string shown as true (non-empty) or false.
// Field notes:
//   rejected: refused requests by reason: "unknown_chunk", "wrong_size",
//     "non_finite", "not_initialized", "layout_mismatch", "bad_request".
//   ssp_max_lead: ssp, the largest (worker clock - slowest active clock) a
//     pull was answered at; never above the staleness bound.
//   evicted_workers: workers the sync/ssp timeout gave up waiting for.
//   aborted: non-empty (the reason) once the job was aborted.
//   last_snapshot_unix_s: when the newest snapshot this shard
//     would fall back to was written (one this process wrote, or the one it
//     was restored from), unix seconds; 0 = none. snapshots_written /
//     snapshots_failed: snapshot writes by this process.
#define DOWNPOUR_SHARD_STATS_FIELDS(X)                                  \
  X(int32_t, shard_index, "shard", Number)                              \
  X(int32_t, num_shards, "num_shards", Number)                          \
  X(bool, initialized, "initialized", Bool)                             \
  X(int32_t, num_chunks, "chunks", Number)                              \
  X(int64_t, num_elements, "elements", Number)                          \
  X(int64_t, pulls, "pulls", Number)                                    \
  X(int64_t, pushes_applied, "pushes_applied", Number)                  \
  X(int64_t, pushes_duplicate, "pushes_duplicate", Number)              \
  X(ShardStats::Counts, rejected, "rejected", Counts)                   \
  X(double, staleness_mean, "staleness_mean", Mean)                     \
  X(int64_t, staleness_max, "staleness_max", Number)                    \
  X(int64_t, total_chunk_updates, "chunk_updates", Number)              \
  X(int64_t, bytes_pulled, "bytes_pulled", Number)                      \
  X(int64_t, bytes_pushed, "bytes_pushed", Number)                      \
  X(std::string, optimizer, "optimizer", Text)                          \
  X(std::string, mode, "mode", Text)                                    \
  X(int64_t, staleness_p50, "staleness_p50", Number)                    \
  X(int64_t, staleness_p99, "staleness_p99", Number)                    \
  X(int64_t, dropped_stale, "dropped_stale", Number)                    \
  X(int64_t, steps, "steps", Number)                                    \
  X(int64_t, ssp_max_lead, "ssp_max_lead", Number)                      \
  X(std::vector<int32_t>, evicted_workers, "evicted_workers", Ids)      \
  X(std::string, aborted, "aborted", Flag)                              \
  X(int64_t, last_snapshot_unix_s, "last_snapshot_unix_s", Number)      \
  X(int64_t, snapshots_written, "snapshots_written", Number)            \
  X(int64_t, snapshots_failed, "snapshots_failed", Number)

struct ShardStats {
  using Counts = std::map<std::string, int64_t>;

#define DOWNPOUR_SHARD_STATS_MEMBER(type, name, json_key, kind) type name{};
  DOWNPOUR_SHARD_STATS_FIELDS(DOWNPOUR_SHARD_STATS_MEMBER)
#undef DOWNPOUR_SHARD_STATS_MEMBER
};

// One-line JSON rendering, e.g. for logs and the launcher's summary.
std::string ShardStatsToJson(const ShardStats& s);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SHARD_STATS_H_
