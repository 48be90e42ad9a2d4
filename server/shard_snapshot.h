// File: server/shard_snapshot.h
//
// A parameter-server shard's snapshot, everything it needs to go on after a
// restart, and its file format.
//
// A snapshot holds, per owned chunk, the values, the optimizer state and the
// version; the push dedup table with worker incarnations (at most once
// survives the restart); the mode's state (ssp clocks; the sync step is the
// chunks' version). The store takes it (ParameterStore::Save) chunk by
// chunk, holding each chunk's lock for one copy of its optimizer state, so
// pushes never stop for longer than that.
//
// File: a safetensors file (any safetensors reader opens it) named
// `shard-<k>-of-<S>-<unix_ms>.safetensors` in the checkpoint folder. Tensors
// `chunk.<id>.values` and `chunk.<id>.opt` (float32); `__metadata__` holds
// string values (per the safetensors spec): "downpour_snapshot" is a JSON
// object with the layout, shard_index, num_shards, step, created_unix_ms,
// versions, dedup table (each worker's part bitmap as hex digits), clocks,
// optimizer and a checksum of the data. The checksum catches corruption, not
// forgery: ParameterStore::Restore checks the values themselves.
// Written atomically: a temporary file, fsync, rename, fsync of the folder;
// the folder keeps the newest kKeepSnapshots of each shard.
//
//   DP_ASSIGN_OR_RETURN(ShardSnapshot s, store->Save());
//   DP_ASSIGN_OR_RETURN(std::string path, WriteShardSnapshot(dir, s, {}));
//   DP_ASSIGN_OR_RETURN(LoadedSnapshot l, LoadLatestShardSnapshot(dir, 0, 2));
//   DP_RETURN_IF_ERROR(store->Restore(l.snapshot));
//
// Thread-safety: free functions over values; no shared state.
#ifndef DOWNPOUR_SERVER_SHARD_SNAPSHOT_H_
#define DOWNPOUR_SERVER_SHARD_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "common/sharding.h"
#include "server/push_dedup.h"

namespace downpour {

inline constexpr int kKeepSnapshots = 2;

// The largest version, clock, step or push seq a snapshot may hold: 2^40
// updates, more than any job reaches (a million a second for twelve days).
// Larger ones are a forged or corrupt file, and near 2^63 they would
// overflow.
inline constexpr int64_t kMaxSnapshotCounter = int64_t{1} << 40;

struct ChunkSnapshot {
  int32_t chunk_id = 0;
  int64_t version = 0;
  // Shared with the live chunk's copy-on-write buffer (never written again).
  std::shared_ptr<const std::vector<float>> values;
  std::vector<float> opt_state;
};

struct ShardSnapshot {
  ModelLayout layout;
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  std::string optimizer;  // e.g. "adagrad": a restore checks it
  std::string mode;       // "async", "sync", "ssp"
  int64_t created_unix_ms = 0;
  // Sum of the chunks' versions (async/ssp); the step (sync).
  int64_t step = 0;
  std::vector<ChunkSnapshot> chunks;  // in the shard's local order
  std::vector<DedupEntry> dedup;
  // The mode's counters: ssp each worker's clock, sync {step}, async none.
  std::vector<int64_t> clocks;
};

struct SnapshotWriteOptions {
  // Testing only: after this many bytes of the temporary file, the process
  // exits at once (_exit(86)), as a crash in the middle of a write would.
  int64_t debug_crash_after_bytes = -1;
  // The largest header written; a larger one fails the write. Tests lower it.
  uint64_t max_header_bytes = kMaxSafetensorsHeaderBytes;
};

// Writes the snapshot into `dir` (created 0700 if missing; the file is
// 0600) and prunes older ones of the same shard beyond kKeepSnapshots.
// Returns the file's path. Unavailable naming the path on an I/O error (the
// temporary file is removed); ResourceExhausted, writing nothing and
// pruning nothing, when the header would be larger than a reader accepts
// (kMaxSafetensorsHeaderBytes).
absl::StatusOr<std::string> WriteShardSnapshot(
    const std::string& dir, const ShardSnapshot& s,
    const SnapshotWriteOptions& options);

// Reads one snapshot file. DataLoss for a truncated or corrupt file
// (malformed safetensors, bad metadata, checksum mismatch, sizes that do not
// match the layout) or one CheckSnapshotValues refuses, naming the path and
// what is wrong.
absl::StatusOr<ShardSnapshot> ReadShardSnapshot(const std::string& path);

// InvalidArgument unless every value and optimizer float is finite and
// every version, clock, step and dedup seq is in [0, kMaxSnapshotCounter].
absl::Status CheckSnapshotValues(const ShardSnapshot& s);

struct LoadedSnapshot {
  ShardSnapshot snapshot;
  std::string path;
  // One line per newer snapshot that was refused, with the reason.
  std::vector<std::string> refused;
};

// The newest readable snapshot of shard `shard_index` of `num_shards` in
// `dir`: a corrupt or truncated one is refused (listed in `refused`) and the
// next older one is tried; files of another shard count or layout are
// never used. NotFound when there is none (a fresh start); DataLoss naming
// every refused file and why when there are some and none is readable.
absl::StatusOr<LoadedSnapshot> LoadLatestShardSnapshot(const std::string& dir,
                                                       int32_t shard_index,
                                                       int32_t num_shards);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SHARD_SNAPSHOT_H_
