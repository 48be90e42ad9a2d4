#include "tests/bench/apply_stages.h"

#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/sharding.h"
#include "rpc/wire.h"
#include "server/optimizer.h"
#include "server/parameter_store.h"
#include "tests/bench/transport_bench_util.h"

namespace downpour {
namespace transport_bench {
namespace {

// Written by timed code so the compiler cannot drop it.
volatile char g_sink = 0;

// The chunks of `map` over the floats of `v`, as ParameterStore takes them.
std::vector<ChunkBytes> ChunksOf(const ShardMap& map,
                                 const std::vector<float>& v) {
  std::vector<ChunkBytes> out;
  for (const Chunk& c : map.chunks) {
    out.push_back({c.id, 0, v.data() + c.flat_offset, c.num_elements * 4});
  }
  return out;
}

// A received message arrives as slices: cut it into 256 KiB pieces at odd
// offsets, as a TCP reader would.
wire::Pieces CutIntoPieces(const std::string& message) {
  wire::Pieces pieces;
  for (size_t at = 0; at < message.size(); at += (256 << 10) + 3) {
    pieces.push_back(absl::string_view(message).substr(at, (256 << 10) + 3));
  }
  return pieces;
}

// The chunks of `map` over `v` as wire chunk records of field `field`,
// behind `prefix` (a push's leading fields, or nothing for a pull).
std::string WireMessage(const ShardMap& map, const std::vector<float>& v,
                        int field, std::string prefix) {
  for (const Chunk& c : map.chunks) {
    prefix += wire::ChunkHeader(field, c.id, 0, wire::Encoding::kRawF32,
                                c.num_elements * 4);
    prefix.append(reinterpret_cast<const char*>(v.data() + c.flat_offset),
                  c.num_elements * 4);
  }
  return prefix;
}

// Push, server side (server/grpc_service.cc): parse, take each payload as
// ranges of the received pieces (no gather), then the store validates and
// applies straight from them.
void AddPushStages(const ShardMap& map, const std::vector<float>& grads,
                   int rounds, ParameterStore& store,
                   const std::function<void(const std::string&, double)>& add) {
  std::string prefix;
  wire::PutVarintField(1, 0, &prefix);
  wire::PutVarintField(2, 1, &prefix);
  const std::string message = WireMessage(map, grads, 3, std::move(prefix));
  const wire::Pieces pieces = CutIntoPieces(message);
  std::vector<ChunkBytes> views;
  std::vector<absl::string_view> ranges;
  add("push: server parses slices into payload ranges (no gather)",
      MedianSeconds(rounds, [&] {
        absl::StatusOr<wire::PushMessage> m = wire::ParsePushRequest(pieces);
        const std::vector<absl::Span<const absl::string_view>> payload =
            wire::PayloadRanges(pieces, m->chunks, &ranges);
        views.clear();
        for (size_t i = 0; i < m->chunks.size(); ++i) {
          views.push_back({m->chunks[i].chunk_id, 0, nullptr,
                           m->chunks[i].data.size, payload[i]});
        }
      }));
  int64_t seq = 1;
  add("push: ParameterStore::Push from the pieces (validate + sgd)",
      MedianSeconds(rounds, [&] { (void)store.Push(0, seq++, views); }));
}

// Pull, server side: a reference to each chunk's copy-on-write buffer is
// taken under its lock; gRPC sends from it (no copy). Then the client's
// parse and gather, with each kind of store.
void AddPullStages(const ShardMap& map, const std::vector<float>& init,
                   int64_t bytes, int rounds, int64_t streaming_pull_min_bytes,
                   ParameterStore& store,
                   const std::function<void(const std::string&, double)>& add) {
  std::vector<ChunkView> held;
  add("pull: server takes references to chunk buffers (Pull, no copy)",
      MedianSeconds(rounds, [&] {
        held.clear();
        (void)store.Pull({}, [&](const ChunkView& c) { held.push_back(c); });
      }));
  held.clear();
  std::vector<float> params(bytes / 4);
  absl::StatusOr<std::vector<wire::WireChunk>> pulled;
  const std::string message = WireMessage(map, init, 1, "");
  const wire::Pieces pieces = CutIntoPieces(message);
  const wire::Store used = wire::StoreFor(bytes, streaming_pull_min_bytes);
  for (const wire::Store kind_of_store :
       {wire::Store::kCached, wire::Store::kStreaming}) {
    const std::string kind = kind_of_store == wire::Store::kCached
                                 ? "cached stores"
                                 : "streaming stores";
    add(kind_of_store == used
            ? absl::StrCat("pull: client parses slices, gathers (", kind, ")")
            : absl::StrCat("  not used at this size: the gather with ", kind),
        MedianSeconds(rounds, [&] {
          pulled = wire::ParsePullResponse(pieces);
          std::string bytes_scratch;
          for (const wire::WireChunk& c : *pulled) {
            (void)wire::DecodeInto(
                pieces, c, params.data() + map.chunks[c.chunk_id].flat_offset,
                c.data.size / 4, &bytes_scratch, kind_of_store);
          }
        }));
  }
}

}  // namespace

double MeasureMemcpy(int64_t bytes, int rounds) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  volatile char sink = 0;
  const double s = MedianSeconds(rounds, [&] {
    std::memcpy(dst.data(), src.data(), bytes);
    sink = dst[bytes / 2];
  });
  (void)sink;
  return bytes / s;
}

ApplyResult MeasureApply(const std::string& name, int64_t bytes, int rounds) {
  ApplyResult result;
  result.optimizer = name;
  const int64_t n = bytes / 4;
  OptimizerOptions opt;
  opt.name = name;
  opt.learning_rate = 1e-6f;

  // Optimizer alone: one pass over params, state and gradient.
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(opt);
  if (!optimizer.ok()) {
    result.error = optimizer.status().ToString();
    return result;
  }
  {
    std::vector<float> params(n, 0.5f), grads(n, 0.0f);
    std::vector<float> state(n * (*optimizer)->StateSize(),
                             (*optimizer)->InitialState());
    result.optimizer_only = bytes / MedianSeconds(rounds, [&] {
      (*optimizer)->Apply(n, grads.data(), 1.0f, params.data(), state.data());
    });
  }

  // The store: validation (ids, sizes, finiteness), locks, versions, apply.
  ParameterStoreOptions store_options;
  store_options.optimizer = opt;
  absl::StatusOr<std::unique_ptr<ParameterStore>> store =
      ParameterStore::Create(store_options);
  absl::Status s = store.status();
  const ModelLayout layout = OneTensorLayout(n, 1, kMiB);
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  if (s.ok()) s = map.status();
  const std::vector<float> init(n, 0.5f), grads(n, 0.0f);
  if (s.ok()) s = (*store)->Declare(layout, ChunksOf(*map, init)).status();
  if (!s.ok()) {
    result.error = s.ToString();
    return result;
  }
  const std::vector<ChunkBytes> g = ChunksOf(*map, grads);
  int64_t seq = 1;
  absl::Status push_status;
  const double t = MedianSeconds(rounds, [&] {
    absl::StatusOr<PushResult> r = (*store)->Push(0, seq++, g);
    if (!r.ok()) push_status = r.status();
  });
  if (!push_status.ok()) {
    result.error = push_status.ToString();
    return result;
  }
  result.store_push = bytes / t;
  return result;
}

std::vector<Stage> MeasureCopyStages(int64_t bytes, int rounds,
                                     int64_t streaming_pull_min_bytes,
                                     std::string* error) {
  std::vector<Stage> stages;
  const int64_t n = bytes / 4;
  const ModelLayout layout = OneTensorLayout(n, 1, kMiB);
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  ParameterStoreOptions store_options;
  store_options.optimizer = TinySgd();
  absl::StatusOr<std::unique_ptr<ParameterStore>> store =
      ParameterStore::Create(store_options);
  if (!map.ok() || !store.ok()) {
    *error = !map.ok() ? map.status().ToString() : store.status().ToString();
    return stages;
  }
  const std::vector<float> init(n, 0.5f), grads(n, 0.0f);
  if (absl::Status s = (*store)->Declare(layout, ChunksOf(*map, init)).status();
      !s.ok()) {
    *error = s.ToString();
    return stages;
  }
  auto add = [&](const std::string& name, double seconds) {
    stages.push_back({name, bytes / seconds, seconds});
  };

  // Baseline: what any fresh buffer of this size costs before use (malloc
  // hands large blocks out as new mmap'd pages; each 4 KB page faults).
  add("baseline: first touch of a fresh allocation",
      MedianSeconds(rounds, [&] {
        std::unique_ptr<char[]> fresh(new char[bytes]);
        std::memset(fresh.get(), 1, bytes);
        g_sink = fresh[bytes / 3];
      }));
  // The stages of the real path (server/grpc_service.cc,
  // worker/grpc_ps_client.cc).
  AddPushStages(*map, grads, rounds, **store, add);
  AddPullStages(*map, init, bytes, rounds, streaming_pull_min_bytes, **store,
                add);
  return stages;
}

}  // namespace transport_bench
}  // namespace downpour
