// libFuzzer target: a parameter store (async, sync or ssp; 2 workers) fed
// decoded requests, as the gRPC service feeds it: the input is a sequence of
// operations, each a byte and a length-prefixed message: a PushRequest read
// by rpc/wire.h's reader (payloads decoded), a PullRequest through protobuf,
// a leave, a second declaration or a stats read. Nothing may crash, and the
// shard's values stay finite (pushes of NaN/Inf are refused).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/sharding.h"
#include "fuzz/fuzz_util.h"
#include "proto/parameter_server.pb.h"
#include "rpc/wire.h"
#include "server/parameter_store.h"

namespace downpour {
namespace {

ModelLayout FuzzLayout() {
  ModelLayout layout;
  layout.tensors = {{"w", {40, 33}}, {"b", {7}}, {"e", {0}}};
  layout.max_chunk_bytes = 1024;
  return layout;
}

void Push(ParameterStore* store, const std::string& bytes) {
  const wire::Pieces pieces{bytes};
  absl::StatusOr<wire::PushMessage> m = wire::ParsePushRequest(pieces);
  if (!m.ok()) return;
  if (m->leave) {
    (void)store->Leave(m->worker_id);
    return;
  }
  std::vector<std::vector<float>> values(m->chunks.size());
  std::vector<ChunkBytes> grads(m->chunks.size());
  std::string scratch;
  for (size_t i = 0; i < m->chunks.size(); ++i) {
    const wire::WireChunk& c = m->chunks[i];
    const int64_t n = c.data.size / wire::BytesPerValue(c.encoding);
    values[i].resize(static_cast<size_t>(n));
    if (!wire::DecodeInto(pieces, c, values[i].data(), n, &scratch).ok()) return;
    grads[i] = ChunkBytes{c.chunk_id, c.version, values[i].data(), n * 4, {}};
  }
  (void)store->Push(PushId{m->worker_id, m->seq, m->part,
                           m->num_parts == 0 ? 1 : m->num_parts,
                           m->incarnation},
                    grads);
}

void Pull(ParameterStore* store, const std::string& bytes) {
  proto::PullRequest req;
  if (!req.ParseFromString(bytes)) return;
  std::vector<int32_t> ids(req.chunk_ids().begin(), req.chunk_ids().end());
  if (ids.size() > 4096) return;
  (void)store->Pull(ids, [](const ChunkView& c) {
    for (int64_t i = 0; i < c.num_elements; ++i) {
      if (!std::isfinite(c.data[i])) __builtin_trap();
    }
  });
}

}  // namespace
}  // namespace downpour

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  fuzz::FuzzInput in(data, size);
  ParameterStoreOptions options;
  const TrainMode modes[3] = {TrainMode::kAsync, TrainMode::kSync,
                              TrainMode::kSsp};
  options.mode = modes[in.Byte() % 3];
  options.num_workers = 2;
  options.staleness = 1;
  options.optimizer.name = "adagrad";
  options.sync_timeout = absl::Milliseconds(50);
  options.log = [](const std::string&) {};
  auto store = ParameterStore::Create(options);
  if (!store.ok()) __builtin_trap();
  const ModelLayout layout = FuzzLayout();
  auto map = ComputeShardMap(layout);
  if (!map.ok()) __builtin_trap();
  std::vector<std::vector<float>> init;
  std::vector<ChunkBytes> initial;
  for (const Chunk& c : map->chunks) {
    init.emplace_back(static_cast<size_t>(c.num_elements), 0.5f);
  }
  for (size_t i = 0; i < map->chunks.size(); ++i) {
    initial.push_back(ChunkBytes{map->chunks[i].id, 0, init[i].data(),
                                 map->chunks[i].num_elements * 4, {}});
  }
  if (!(*store)->Declare(layout, initial).ok()) __builtin_trap();
  for (int op = 0; op < 64 && in.left() > 0; ++op) {
    const uint8_t kind = in.Byte();
    const size_t len = in.Byte() | (static_cast<size_t>(in.Byte()) << 8);
    const std::string msg = in.Bytes(len);
    switch (kind % 4) {
      case 0:
      case 1:
        Push(store->get(), msg);
        break;
      case 2:
        Pull(store->get(), msg);
        break;
      default:
        (void)(*store)->Stats();
        (void)(*store)->Declare(layout, initial);
        break;
    }
  }
  Pull(store->get(), "");  // Every chunk: finite.
  (*store)->Shutdown();
  return 0;
}
