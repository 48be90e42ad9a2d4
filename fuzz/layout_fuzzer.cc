// libFuzzer target: DeclareModel layouts (common/sharding.h's ValidateLayout
// and ComputeShardMap, then a layout-only ParameterStore::Declare). The input
// spells a layout directly (shards, chunk size, tensors with raw 64-bit
// dimensions), so huge, negative and overflowing shapes are reached at once.
// An accepted layout must give a map that covers exactly its elements in
// chunks of at most max_chunk_bytes.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/sharding.h"
#include "fuzz/fuzz_util.h"
#include "server/parameter_store.h"

namespace downpour {
namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

int64_t Int64(fuzz::FuzzInput* in) {
  const std::string b = in->Bytes(8);
  uint64_t v = 0;
  std::memcpy(&v, b.data(), b.size());
  return static_cast<int64_t>(v);
}

// A dimension: mostly small, sometimes any 64-bit value.
int64_t Dim(fuzz::FuzzInput* in) {
  const uint8_t k = in->Byte();
  if (k < 200) return k;
  if (k < 240) return int64_t{1} << (k - 200);
  return Int64(in);
}

ModelLayout ReadLayout(fuzz::FuzzInput* in) {
  ModelLayout layout;
  const uint8_t s = in->Byte();
  layout.num_shards = s < 250 ? s % 9 : static_cast<int32_t>(Int64(in));
  const uint8_t m = in->Byte();
  layout.max_chunk_bytes = m < 250 ? (int64_t{4} << (m % 24)) + (m & 3)
                                   : Int64(in);
  layout.spread_min_bytes = int64_t{1} << (in->Byte() % 40);
  const int tensors = in->Byte() % 8;
  for (int t = 0; t < tensors; ++t) {
    TensorSpec spec;
    spec.name = in->Bytes(in->Byte() % 4);
    const int rank = in->Byte() % 6;
    for (int d = 0; d < rank; ++d) spec.shape.push_back(Dim(in));
    layout.tensors.push_back(spec);
  }
  return layout;
}

}  // namespace
}  // namespace downpour

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  fuzz::FuzzInput in(data, size);
  const ModelLayout layout = ReadLayout(&in);
  LayoutLimits limits;
  limits.max_chunks = 1 << 14;  // Keeps one execution fast.
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout, limits);
  if (!map.ok()) {
    Check(map.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  int64_t total = 0;
  for (const Chunk& c : map->chunks) {
    Check(c.num_elements >= 0 && c.num_elements * 4 <= layout.max_chunk_bytes);
    Check(c.shard >= 0 && c.shard < layout.num_shards);
    total += c.num_elements;
  }
  Check(total == layout.NumElements());
  size_t owned = 0;
  for (const auto& ids : map->shard_chunks) owned += ids.size();
  Check(owned == map->chunks.size());
  ParameterStoreOptions options;
  options.num_shards = layout.num_shards;
  options.layout_limits = limits;
  options.log = [](const std::string&) {};
  auto store = ParameterStore::Create(options);
  Check(store.ok());
  Check((*store)->Declare(layout, {}).ok());
  return 0;
}
