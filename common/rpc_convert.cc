#include "common/rpc_convert.h"

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
}

ModelLayout LayoutFromProto(const proto::ModelLayout& p) {
  ModelLayout l;
  for (const proto::TensorSpec& t : p.tensors()) {
    l.tensors.push_back({t.name(), {t.shape().begin(), t.shape().end()}});
  }
  l.max_chunk_bytes = p.max_chunk_bytes();
  l.num_shards = p.num_shards();
  l.spread_min_bytes = p.spread_min_bytes();
  return l;
}

void StatsToProto(const ShardStats& s, proto::StatsResponse* out) {
  out->set_shard_index(s.shard_index);
  out->set_num_shards(s.num_shards);
  out->set_initialized(s.initialized);
  out->set_num_chunks(s.num_chunks);
  out->set_num_elements(s.num_elements);
  out->set_pulls(s.pulls);
  out->set_pushes_applied(s.pushes_applied);
  out->set_pushes_duplicate(s.pushes_duplicate);
  for (const auto& [k, v] : s.rejected) (*out->mutable_rejected())[k] = v;
  out->set_staleness_mean(s.staleness_mean);
  out->set_staleness_max(s.staleness_max);
  out->set_total_chunk_updates(s.total_chunk_updates);
  out->set_bytes_pulled(s.bytes_pulled);
  out->set_bytes_pushed(s.bytes_pushed);
  out->set_optimizer(s.optimizer);
  out->set_mode(s.mode);
  out->set_staleness_p50(s.staleness_p50);
  out->set_staleness_p99(s.staleness_p99);
  out->set_dropped_stale(s.dropped_stale);
  out->set_steps(s.steps);
  out->set_ssp_max_lead(s.ssp_max_lead);
  for (int32_t w : s.evicted_workers) out->add_evicted_workers(w);
  out->set_aborted(s.aborted);
}

ShardStats StatsFromProto(const proto::StatsResponse& p) {
  ShardStats s;
  s.shard_index = p.shard_index();
  s.num_shards = p.num_shards();
  s.initialized = p.initialized();
  s.num_chunks = p.num_chunks();
  s.num_elements = p.num_elements();
  s.pulls = p.pulls();
  s.pushes_applied = p.pushes_applied();
  s.pushes_duplicate = p.pushes_duplicate();
  for (const auto& [k, v] : p.rejected()) s.rejected[k] = v;
  s.staleness_mean = p.staleness_mean();
  s.staleness_max = p.staleness_max();
  s.total_chunk_updates = p.total_chunk_updates();
  s.bytes_pulled = p.bytes_pulled();
  s.bytes_pushed = p.bytes_pushed();
  s.optimizer = p.optimizer();
  s.mode = p.mode();
  s.staleness_p50 = p.staleness_p50();
  s.staleness_p99 = p.staleness_p99();
  s.dropped_stale = p.dropped_stale();
  s.steps = p.steps();
  s.ssp_max_lead = p.ssp_max_lead();
  s.evicted_workers.assign(p.evicted_workers().begin(), p.evicted_workers().end());
  s.aborted = p.aborted();
  return s;
}

}  // namespace downpour
