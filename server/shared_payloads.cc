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
  return regions_.Get(ref);
}

absl::StatusOr<std::shared_ptr<const std::vector<SharedPayloads::Place>>>
SharedPayloads::Places() {
  absl::MutexLock l(&mu_);
  if (places_ != nullptr) return places_;
  absl::StatusOr<ShardMap> map = store_->shard_map();
  if (!map.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: ", map.status().message()));
  }
  auto places = std::make_shared<std::vector<Place>>(map->chunks.size());
  for (const Chunk& c : map->chunks) {
    (*places)[c.id] = Place{c.flat_offset, c.num_elements};
  }
  places_ = std::move(places);
  return places_;
}

absl::Status SharedPayloads::TakePush(const MappedRegion& region,
                                      const wire::SharedRef& ref, bool reply,
                                      wire::PushMessage* msg,
                                      wire::Pieces* pieces, std::string* copy) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<Place>> places, Places());
  int64_t total = 0;
  for (const wire::WireChunk& c : msg->chunks) {
    if (c.encoding != wire::Encoding::kRawF32 || c.data.size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push: chunk ", c.chunk_id, " names shared memory but carries ",
          c.data.size, " bytes in ", wire::EncodingName(c.encoding),
          " (shared payloads are float32, in the region only)"));
    }
    if (c.chunk_id < static_cast<int64_t>(places->size())) {
      total += 4 * (*places)[c.chunk_id].num_elements;
    }
  }
  copy->resize(static_cast<size_t>(total));
  const size_t piece = pieces->size();
  int64_t at = 0;
  for (wire::WireChunk& c : msg->chunks) {
    if (c.chunk_id >= static_cast<int64_t>(places->size())) continue;
    const Place& p = (*places)[c.chunk_id];
    DP_ASSIGN_OR_RETURN(absl::string_view bytes,
                        region.Read(ref.push_offset, 4 * p.flat_offset,
                                    4 * p.num_elements));
    if (reply) {
      DP_RETURN_IF_ERROR(region
                             .Write(ref.reply_offset, 4 * p.flat_offset,
                                    4 * p.num_elements)
                             .status());
    }
    std::memcpy(copy->data() + at, bytes.data(), bytes.size());
    c.data = wire::DataRef{piece, static_cast<size_t>(at),
                           static_cast<int64_t>(bytes.size())};
    at += static_cast<int64_t>(bytes.size());
  }
  pieces->emplace_back(*copy);
  return absl::OkStatus();
}

absl::Status SharedPayloads::WriteReply(const MappedRegion& region,
                                        uint64_t reply_offset,
                                        const std::vector<ChunkView>& chunks) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<Place>> places, Places());
  for (const ChunkView& c : chunks) {
    if (c.chunk_id < 0 || c.chunk_id >= static_cast<int64_t>(places->size()) ||
        (*places)[c.chunk_id].num_elements != c.num_elements) {
      return absl::InternalError(
          absl::StrCat("shared memory: chunk ", c.chunk_id, " has no place"));
    }
    DP_ASSIGN_OR_RETURN(
        char* dst, region.Write(reply_offset, 4 * (*places)[c.chunk_id].flat_offset,
                               4 * c.num_elements));
    std::memcpy(dst, c.data, static_cast<size_t>(4 * c.num_elements));
  }
  return absl::OkStatus();
}

}  // namespace downpour
