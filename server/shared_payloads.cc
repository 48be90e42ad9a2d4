#include "server/shared_payloads.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {

absl::StatusOr<std::shared_ptr<MappedRegion>> SharedPayloads::Region(
    absl::string_view peer, const wire::SharedRef& ref, bool has_standby) {
  if (has_standby) {
    return absl::FailedPreconditionError(
        "shared memory: a shard with a standby takes payloads over gRPC only");
  }
  if (!IsLoopbackPeer(peer)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory: peer ", peer, " is not on this host's loopback"));
  }
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, GetModel());
  if (!SharedRegion::Fits(ref, 4 * model->total_elements) &&
      !SharedRegion::Fits(ref, 4 * model->total_elements, model->num_shards)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory: a region of ", ref.size, " bytes does not fit a model of ",
        model->total_elements, " floats"));
  }
  return regions_.Get(ref);
}

absl::StatusOr<std::shared_ptr<const SharedPayloads::Model>>
SharedPayloads::GetModel() {
  absl::MutexLock l(&mu_);
  if (model_ != nullptr) return model_;
  absl::StatusOr<ShardMap> map = store_->shard_map();
  if (!map.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: ", map.status().message()));
  }
  const int32_t shard = store_->Stats().shard_index;
  auto model = std::make_shared<Model>();
  model->places.resize(map->chunks.size());
  model->total_elements = map->total_elements;
  model->shard = shard;
  model->num_shards = static_cast<int>(map->shard_elements.size());
  for (const Chunk& c : map->chunks) {
    if (c.shard == shard) model->places[c.id] = Place{c.flat_offset, c.num_elements};
  }
  model_ = std::move(model);
  return model_;
}

absl::StatusOr<int> SharedPayloads::CallShard(const MappedRegion& region) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, GetModel());
  if (region.call_shards() != model->num_shards || model->num_shards == 0) {
    return absl::FailedPreconditionError(
        "shared memory: the region has no call blocks for this model");
  }
  return model->shard;
}

absl::Status SharedPayloads::TakePush(const MappedRegion& region,
                                      const wire::SharedRef& ref, bool reply,
                                      wire::PushMessage* msg,
                                      wire::Pieces* pieces) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, GetModel());
  const std::vector<Place>& places = model->places;
  const auto own = [&](int32_t id) {
    return id >= 0 && id < static_cast<int64_t>(places.size()) &&
           places[id].num_elements >= 0;
  };
  std::vector<bool> seen(places.size(), false);
  for (const wire::WireChunk& c : msg->chunks) {
    if (c.encoding != wire::Encoding::kRawF32 || c.data.size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push: chunk ", c.chunk_id, " names shared memory but carries ",
          c.data.size, " bytes in ", wire::EncodingName(c.encoding),
          " (shared payloads are float32, in the region only)"));
    }
    if (!own(c.chunk_id)) continue;
    if (seen[c.chunk_id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: chunk ", c.chunk_id, " named twice"));
    }
    seen[c.chunk_id] = true;
  }
  for (wire::WireChunk& c : msg->chunks) {
    if (!own(c.chunk_id)) continue;
    const Place& p = places[c.chunk_id];
    DP_ASSIGN_OR_RETURN(absl::string_view bytes,
                        region.Read(ref.push_offset, 4 * p.flat_offset,
                                    4 * p.num_elements));
    if (reply) {
      DP_RETURN_IF_ERROR(region
                             .Write(ref.reply_offset, 4 * p.flat_offset,
                                    4 * p.num_elements)
                             .status());
    }
    c.data = wire::DataRef{pieces->size(), 0,
                           static_cast<int64_t>(bytes.size())};
    pieces->push_back(bytes);
  }
  return absl::OkStatus();
}

absl::Status SharedPayloads::WriteReply(const MappedRegion& region,
                                        uint64_t reply_offset,
                                        const std::vector<ChunkView>& chunks) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, GetModel());
  const std::vector<Place>& places = model->places;
  for (const ChunkView& c : chunks) {
    if (c.chunk_id < 0 || c.chunk_id >= static_cast<int64_t>(places.size()) ||
        places[c.chunk_id].num_elements != c.num_elements) {
      return absl::InternalError(
          absl::StrCat("shared memory: chunk ", c.chunk_id, " has no place"));
    }
    DP_ASSIGN_OR_RETURN(
        char* dst, region.Write(reply_offset, 4 * places[c.chunk_id].flat_offset,
                                4 * c.num_elements));
    if (c.num_elements == 0) continue;  // An empty chunk has no data pointer.
    std::memcpy(dst, c.data, static_cast<size_t>(4 * c.num_elements));
  }
  return absl::OkStatus();
}

}  // namespace downpour
