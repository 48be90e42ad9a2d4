// libFuzzer target: a shard snapshot file (server/shard_snapshot.h) read and
// restored into a fresh store, as ps_server does at start
// (server/snapshotter.h): ReadShardSnapshot, then ParameterStore::Restore
// into a store of the snapshot's shard, optimizer and mode. Nothing may
// crash; a restored store serves finite values, takes a push, and its next
// snapshot passes the same checks as a file.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/train_mode.h"
#include "fuzz/fuzz_util.h"
#include "server/parameter_store.h"
#include "server/shard_snapshot.h"

namespace downpour {
namespace {

void RestoreAndServe(const ShardSnapshot& s) {
  absl::StatusOr<TrainMode> mode = ParseTrainMode(s.mode);
  if (!mode.ok()) return;
  ParameterStoreOptions o;
  o.shard_index = s.shard_index;
  o.num_shards = s.num_shards;
  o.optimizer.name = s.optimizer;
  o.optimizer.learning_rate = 0.1f;
  o.mode = *mode;
  o.num_workers = 4;
  o.sync_timeout = absl::Milliseconds(1);
  o.log = [](const std::string&) {};
  absl::StatusOr<std::unique_ptr<ParameterStore>> store = ParameterStore::Create(o);
  if (!store.ok()) return;
  if (!(*store)->Restore(s).ok()) return;
  // Served values are finite.
  std::vector<int32_t> ids;
  std::vector<int64_t> sizes;
  absl::Status pulled = (*store)->Pull({}, [&](const ChunkView& c) {
    for (int64_t i = 0; i < c.num_elements; ++i) {
      if (!std::isfinite(c.data[i])) __builtin_trap();
    }
    ids.push_back(c.chunk_id);
    sizes.push_back(c.num_elements);
  });
  if (!pulled.ok()) __builtin_trap();
  // A push of ones to every chunk, as worker 0's next one: applied, a
  // duplicate or refused, never a crash.
  std::vector<std::vector<float>> ones(ids.size());
  std::vector<ChunkBytes> grads;
  for (size_t i = 0; i < ids.size(); ++i) {
    ones[i].assign(static_cast<size_t>(sizes[i]), 1.0f);
    grads.push_back(ChunkBytes{ids[i], 0, ones[i].data(), sizes[i] * 4});
  }
  PushId id{0, 1, 0, 1, 1};
  for (const DedupEntry& e : s.dedup) {
    if (e.worker_id == 0) {
      id.seq = e.seq + 1;
      id.incarnation = e.incarnation;
    }
  }
  (void)(*store)->Push(id, grads);
  (void)(*store)->Stats();
  absl::StatusOr<ShardSnapshot> again = (*store)->Save();
  if (!again.ok() || !CheckSnapshotValues(*again).ok()) __builtin_trap();
}

}  // namespace
}  // namespace downpour

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = downpour::fuzz::WriteScratchFile(
      "shard-0-of-1-1.safetensors",
      std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<downpour::ShardSnapshot> s = downpour::ReadShardSnapshot(path);
  if (s.ok()) downpour::RestoreAndServe(*s);
  return 0;
}
