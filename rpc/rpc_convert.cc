#include "rpc/rpc_convert.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace downpour {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

void LayoutToProto(const ModelLayout& layout, proto::ModelLayout* out) {
  out->Clear();
  for (const TensorSpec& t : layout.tensors) {
    proto::TensorSpec* p = out->add_tensors();
    p->set_name(t.name);
    for (int64_t d : t.shape) p->add_shape(d);
  }
  out->set_max_chunk_bytes(layout.max_chunk_bytes);
  out->set_num_shards(layout.num_shards);
  out->set_spread_min_bytes(layout.spread_min_bytes);
  for (const int32_t b : layout.pinned_blocks) out->add_pinned_blocks(b);
}

ModelLayout LayoutFromProto(const proto::ModelLayout& p) {
  ModelLayout l;
  for (const proto::TensorSpec& t : p.tensors()) {
    l.tensors.push_back({t.name(), {t.shape().begin(), t.shape().end()}});
  }
  l.max_chunk_bytes = p.max_chunk_bytes();
  l.num_shards = p.num_shards();
  l.spread_min_bytes = p.spread_min_bytes();
  l.pinned_blocks.assign(p.pinned_blocks().begin(), p.pinned_blocks().end());
  return l;
}

// Per-kind halves of the conversions generated from
// DOWNPOUR_SHARD_STATS_FIELDS (see common/shard_stats.h for the kinds).
#define DP_STATS_TO_PROTO_SCALAR(name) out->set_##name(s.name);
#define DP_STATS_TO_PROTO_Number DP_STATS_TO_PROTO_SCALAR
#define DP_STATS_TO_PROTO_Bool DP_STATS_TO_PROTO_SCALAR
#define DP_STATS_TO_PROTO_Mean DP_STATS_TO_PROTO_SCALAR
#define DP_STATS_TO_PROTO_Text DP_STATS_TO_PROTO_SCALAR
#define DP_STATS_TO_PROTO_Flag DP_STATS_TO_PROTO_SCALAR
#define DP_STATS_TO_PROTO_Counts(name) \
  for (const auto& [k, v] : s.name) (*out->mutable_##name())[k] = v;
#define DP_STATS_TO_PROTO_Ids(name) \
  for (int32_t v : s.name) out->add_##name(v);
#define DP_STATS_TO_PROTO(type, name, json_key, kind) \
  DP_STATS_TO_PROTO_##kind(name)

#define DP_STATS_FROM_PROTO_SCALAR(name) s.name = p.name();
#define DP_STATS_FROM_PROTO_Number DP_STATS_FROM_PROTO_SCALAR
#define DP_STATS_FROM_PROTO_Bool DP_STATS_FROM_PROTO_SCALAR
#define DP_STATS_FROM_PROTO_Mean DP_STATS_FROM_PROTO_SCALAR
#define DP_STATS_FROM_PROTO_Text DP_STATS_FROM_PROTO_SCALAR
#define DP_STATS_FROM_PROTO_Flag DP_STATS_FROM_PROTO_SCALAR
#define DP_STATS_FROM_PROTO_Counts(name) \
  s.name.insert(p.name().begin(), p.name().end());
#define DP_STATS_FROM_PROTO_Ids(name) \
  s.name.assign(p.name().begin(), p.name().end());
#define DP_STATS_FROM_PROTO(type, name, json_key, kind) \
  DP_STATS_FROM_PROTO_##kind(name)

void StatsToProto(const ShardStats& s, proto::StatsResponse* out) {
  out->Clear();
  DOWNPOUR_SHARD_STATS_FIELDS(DP_STATS_TO_PROTO)
}

ShardStats StatsFromProto(const proto::StatsResponse& p) {
  ShardStats s;
  DOWNPOUR_SHARD_STATS_FIELDS(DP_STATS_FROM_PROTO)
  return s;
}

void SharedRefToProto(const wire::SharedRef& ref, proto::SharedMemory* out) {
  out->set_pid(ref.pid);
  out->set_fd(ref.fd);
  out->set_key(ref.key);
  out->set_size(ref.size);
  out->set_push_offset(ref.push_offset);
  out->set_reply_offset(ref.reply_offset);
}

wire::SharedRef SharedRefFromProto(const proto::SharedMemory& m) {
  return wire::SharedRef{m.pid(),  m.fd(),          m.key(),
                         m.size(), m.push_offset(), m.reply_offset()};
}

}  // namespace downpour
