#include "worker/part_messages.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/slice.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"

namespace downpour {
namespace {

template <typename Message>
grpc::ByteBuffer Serialized(const Message& msg) {
  grpc::ByteBuffer out;
  bool own = false;
  grpc::SerializationTraits<Message>::Serialize(msg, &out, &own);
  return out;
}

}  // namespace

absl::Status CheckChunksFitMessages(const ModelLayout& layout,
                                    const proto::ModelLayout& layout_proto,
                                    const ShardMap& map) {
  for (const Chunk& c : map.chunks) {
    if (c.num_elements * 4 + layout_proto.ByteSizeLong() + 4096 >
        static_cast<size_t>(kMaxMessageBytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "chunk ", c.id, " of tensor '", layout.tensors[c.tensor_index].name,
          "' has ", c.num_elements * 4, " bytes, over the ", kMaxMessageBytes,
          "-byte message limit: use a smaller max_chunk_bytes"));
    }
  }
  return absl::OkStatus();
}

std::vector<proto::DeclareModelRequest> DeclareRequests(
    const proto::ModelLayout& layout_proto, const ShardMap& map,
    absl::Span<const Part> parts, int32_t worker_id,
    absl::Span<const float> initial) {
  std::vector<proto::DeclareModelRequest> req(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    *req[i].mutable_layout() = layout_proto;
    req[i].set_worker_id(worker_id);
    for (int32_t id : parts[i].chunk_ids) {
      const Chunk& c = map.chunks[id];
      proto::ChunkValues* v = req[i].add_initial();
      v->set_chunk_id(id);
      v->mutable_data()->assign(
          reinterpret_cast<const char*>(initial.data() + c.flat_offset),
          c.num_elements * sizeof(float));
    }
  }
  return req;
}

std::vector<grpc::ByteBuffer> PullRequests(absl::Span<const Part> parts,
                                           int32_t worker_id,
                                           const PullOptions& options,
                                           wire::Encoding encoding,
                                           const SharedRoute& shared) {
  std::vector<grpc::ByteBuffer> req(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    proto::PullRequest r;
    r.set_worker_id(worker_id);
    r.set_min_version(options.min_version);
    r.set_worker_clock(options.worker_clock);
    r.set_encoding(static_cast<proto::Encoding>(encoding));
    for (int32_t id : parts[i].chunk_ids) r.add_chunk_ids(id);
    if (shared.For(parts[i].shard)) {
      SharedRefToProto(shared.region->ref(), r.mutable_shared());
    }
    req[i] = Serialized(r);
  }
  return req;
}

std::vector<grpc::ByteBuffer> PushEncoder::Encode(
    const ShardMap& map, absl::Span<const Part> parts, wire::PushHead head,
    wire::Encoding encoding, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, const SharedRoute& shared) {
  const int n = static_cast<int>(parts.size());
  heads_.resize(n);
  payloads_.resize(n);
  std::vector<grpc::ByteBuffer> req(n);
  for (int i = 0; i < n; ++i) {
    const Part& p = parts[i];
    // Payloads in the region: copied there now, and the message is its
    // header bytes alone.
    const bool in_region = shared.For(p.shard);
    const wire::Encoding enc = in_region ? wire::Encoding::kRawF32 : encoding;
    head.shared.reset();
    if (in_region) head.shared = shared.region->ref();
    // All header bytes first (the string must not move once sliced).
    std::string& heads = heads_[i];
    heads.clear();
    head.part = p.index;
    head.num_parts = p.count;
    wire::AppendPushHead(head, &heads);
    std::vector<size_t> head_end;
    int64_t encoded_total = 0;
    for (int32_t id : p.chunk_ids) {
      const int64_t bytes =
          in_region ? 0 : map.chunks[id].num_elements * wire::BytesPerValue(enc);
      wire::AppendChunkHeader(wire::kPushGradientsField, id, base_versions[id],
                              enc, bytes, &heads);
      head_end.push_back(heads.size());
      encoded_total += bytes;
    }
    std::string& payload = payloads_[i];
    if (enc != wire::Encoding::kRawF32) {
      payload.resize(static_cast<size_t>(encoded_total));
    }
    std::vector<grpc::Slice> slices;
    slices.reserve(2 * p.chunk_ids.size() + 1);
    size_t head_start = 0;
    int64_t payload_at = 0;
    for (size_t k = 0; k < p.chunk_ids.size(); ++k) {
      // Varint fields of the message go out with the first chunk header.
      slices.emplace_back(heads.data() + head_start, head_end[k] - head_start,
                          grpc::Slice::STATIC_SLICE);
      head_start = head_end[k];
      const Chunk& c = map.chunks[p.chunk_ids[k]];
      const float* src = grads.data() + c.flat_offset;
      if (c.num_elements == 0) continue;
      if (in_region) {
        char* dst = shared.region->push_area() + 4 * c.flat_offset;
        // Nothing to copy when the gradient is in the push area already
        // (ParameterClient::PushStaging).
        if (dst != reinterpret_cast<const char*>(src)) {
          std::memcpy(dst, src, static_cast<size_t>(c.num_elements) * 4);
        }
      } else if (enc == wire::Encoding::kRawF32) {
        slices.emplace_back(src, static_cast<size_t>(c.num_elements) * 4,
                            grpc::Slice::STATIC_SLICE);
      } else {
        char* dst = payload.data() + payload_at;
        const int64_t bytes = c.num_elements * wire::BytesPerValue(enc);
        wire::EncodeValues(enc, src, c.num_elements, dst);
        slices.emplace_back(dst, static_cast<size_t>(bytes),
                            grpc::Slice::STATIC_SLICE);
        payload_at += bytes;
      }
    }
    if (p.chunk_ids.empty()) {
      slices.emplace_back(heads.data(), heads.size(), grpc::Slice::STATIC_SLICE);
    }
    req[i] = grpc::ByteBuffer(slices.data(), slices.size());
  }
  return req;
}

absl::Status ReadPulledPart(const ShardMap& map, const Part& part,
                            const grpc::ByteBuffer& resp,
                            absl::Span<float> params,
                            std::vector<int64_t>* versions, wire::Store store,
                            uint64_t* incarnation, const SharedRoute& shared) {
  std::vector<grpc::Slice> slices;
  if (!resp.Dump(&slices).ok()) {
    return absl::InternalError("pull: cannot read the response");
  }
  wire::Pieces pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  bool in_region = false;
  absl::StatusOr<std::vector<wire::WireChunk>> chunks =
      wire::ParsePullResponse(pieces, incarnation, &in_region);
  if (!chunks.ok()) {
    return absl::InternalError(absl::StrCat("shard ", part.shard, ": ",
                                            chunks.status().message()));
  }
  if (chunks->size() != part.chunk_ids.size()) {
    return absl::InternalError(absl::StrCat(
        "shard ", part.shard, " returned ", chunks->size(), " chunks, expected ",
        part.chunk_ids.size()));
  }
  if (in_region && !shared.For(part.shard)) {
    return absl::InternalError(absl::StrCat(
        "shard ", part.shard,
        " says it wrote its values to shared memory this worker did not offer it"));
  }
  std::string scratch;
  for (const wire::WireChunk& c : *chunks) {
    if (c.chunk_id < 0 || c.chunk_id >= static_cast<int32_t>(map.chunks.size()) ||
        map.chunks[c.chunk_id].shard != part.shard) {
      return absl::InternalError(absl::StrCat(
          "shard ", part.shard, " returned chunk ", c.chunk_id,
          " that it does not own"));
    }
    const Chunk& info = map.chunks[c.chunk_id];
    if (in_region) {
      if (c.data.size != 0 || c.encoding != wire::Encoding::kRawF32) {
        return absl::InternalError(absl::StrCat(
            "shard ", part.shard, " sent chunk ", c.chunk_id,
            " both on the wire and in shared memory"));
      }
      wire::CopyBytes(reinterpret_cast<char*>(params.data() + info.flat_offset),
                      shared.region->reply_area() + 4 * info.flat_offset,
                      static_cast<size_t>(info.num_elements) * 4, store);
      (*versions)[c.chunk_id] = c.version;
      continue;
    }
    absl::Status s = wire::DecodeInto(pieces, c, params.data() + info.flat_offset,
                                      info.num_elements, &scratch, store);
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat("shard ", part.shard, ": ", s.message()));
    }
    (*versions)[c.chunk_id] = c.version;
  }
  return absl::OkStatus();
}

bool ReadPushReply(const grpc::ByteBuffer& resp, uint64_t* incarnation) {
  proto::PushResponse r;
  grpc::ByteBuffer copy(resp);  // Deserialize consumes it.
  if (!grpc::SerializationTraits<proto::PushResponse>::Deserialize(&copy, &r)
           .ok()) {
    return false;
  }
  *incarnation = r.server_incarnation();
  return true;
}

}  // namespace downpour
