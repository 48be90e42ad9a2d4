#include "worker/part_messages.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/grpc_config.h"
#include "worker/shard_map_test_util.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/slice.h"

namespace downpour {
namespace {

// Values exact in fp16 and bf16.
std::vector<float> Values(int64_t n, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = offset + 0.25f * static_cast<float>(i % 64);
  return v;
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::string out;
  EXPECT_TRUE(ByteBufferBytes(b, &out));
  return out;
}

// The buffer's slices as they are (a message read in place spans them).
wire::Pieces PiecesOf(const grpc::ByteBuffer& b, std::vector<grpc::Slice>* keep) {
  EXPECT_TRUE(b.Dump(keep).ok());
  wire::Pieces pieces;
  for (const grpc::Slice& s : *keep) {
    pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return pieces;
}

grpc::ByteBuffer BufferOf(const std::vector<std::string>& pieces) {
  std::vector<grpc::Slice> slices;
  for (const std::string& p : pieces) slices.emplace_back(p);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(PartMessagesTest, PushRequestsReadBackInEveryEncoding) {
  const ShardMap map = MapOf({{300, 700, 0, 90}, {1500, 20}});
  const std::vector<Part> parts = PlanParts(map, 4096, 2);
  std::vector<int64_t> base(map.chunks.size());
  for (size_t id = 0; id < base.size(); ++id) base[id] = 10 + id;
  PushEncoder encoder;
  for (wire::Encoding enc : {wire::Encoding::kRawF32, wire::Encoding::kFp16,
                             wire::Encoding::kBf16}) {
    // Each round with other values, through the same encoder's buffers.
    const std::vector<float> grads =
        Values(map.total_elements, static_cast<float>(enc));
    wire::PushHead head;
    head.worker_id = 3;
    head.seq = 9;
    head.incarnation = 77;
    if (enc == wire::Encoding::kFp16) head.pull_encoding = wire::Encoding::kBf16;
    const std::vector<grpc::ByteBuffer> req =
        encoder.Encode(map, parts, head, enc, grads, base);
    ASSERT_EQ(req.size(), parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      std::vector<grpc::Slice> keep;
      const wire::Pieces pieces = PiecesOf(req[i], &keep);
      auto m = wire::ParsePushRequest(pieces);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->worker_id, 3);
      EXPECT_EQ(m->seq, 9);
      EXPECT_EQ(m->part, p.index);
      EXPECT_EQ(m->num_parts, p.count);
      EXPECT_EQ(m->incarnation, 77u);
      EXPECT_EQ(m->pull_encoding, enc == wire::Encoding::kFp16 ? 2 : 0);
      ASSERT_EQ(m->chunks.size(), p.chunk_ids.size());
      std::string scratch;
      for (size_t k = 0; k < p.chunk_ids.size(); ++k) {
        const wire::WireChunk& c = m->chunks[k];
        const Chunk& info = map.chunks[p.chunk_ids[k]];
        EXPECT_EQ(c.chunk_id, info.id);
        EXPECT_EQ(c.version, base[info.id]);
        EXPECT_EQ(c.encoding, enc);
        std::vector<float> got(info.num_elements);
        ASSERT_TRUE(wire::DecodeInto(pieces, c, got.data(), info.num_elements,
                                     &scratch)
                        .ok());
        EXPECT_EQ(got, std::vector<float>(grads.begin() + info.flat_offset,
                                          grads.begin() + info.flat_offset +
                                              info.num_elements));
      }
      // Any protobuf library reads it too.
      proto::PushRequest r;
      ASSERT_TRUE(r.ParseFromString(Bytes(req[i])));
      EXPECT_EQ(r.gradients_size(), static_cast<int>(p.chunk_ids.size()));
      EXPECT_EQ(r.part(), p.index);
    }
  }
}

TEST(PartMessagesTest, APartWithoutChunksCarriesItsHead) {
  const ShardMap map = MapOf({{10}, {}});
  const std::vector<Part> parts = PlanParts(map, 4096, 1);
  ASSERT_EQ(parts.size(), 2u);
  wire::PushHead head;
  head.worker_id = 1;
  head.seq = 4;
  const std::vector<float> grads = Values(10, 0);
  const std::vector<int64_t> base = {0};
  PushEncoder encoder;
  const std::vector<grpc::ByteBuffer> req = encoder.Encode(
      map, parts, head, wire::Encoding::kRawF32, grads, base);
  proto::PushRequest r;
  ASSERT_TRUE(r.ParseFromString(Bytes(req[1])));
  EXPECT_EQ(r.worker_id(), 1);
  EXPECT_EQ(r.seq(), 4);
  EXPECT_EQ(r.num_parts(), 1);
  EXPECT_EQ(r.gradients_size(), 0);
}

TEST(PartMessagesTest, PullRequestsAskForEachPartsChunks) {
  const ShardMap map = MapOf({{500, 500}, {5}});
  const std::vector<Part> parts = PlanParts(map, 4096, 1);
  PullOptions o;
  o.min_version = 6;
  o.worker_clock = 8;
  const std::vector<grpc::ByteBuffer> req =
      PullRequests(parts, 2, o, wire::Encoding::kFp16);
  ASSERT_EQ(req.size(), 2u);
  for (size_t i = 0; i < req.size(); ++i) {
    proto::PullRequest r;
    ASSERT_TRUE(r.ParseFromString(Bytes(req[i])));
    EXPECT_EQ(r.worker_id(), 2);
    EXPECT_EQ(r.min_version(), 6);
    EXPECT_EQ(r.worker_clock(), 8);
    EXPECT_EQ(r.encoding(), proto::FP16);
    EXPECT_EQ(std::vector<int32_t>(r.chunk_ids().begin(), r.chunk_ids().end()),
              parts[i].chunk_ids);
  }
}

// A PullResponse to `part` with the given values, each chunk's payload cut
// in two slices.
grpc::ByteBuffer PullReply(const ShardMap& map, const Part& part,
                           const std::vector<float>& values, wire::Encoding enc,
                           uint64_t incarnation) {
  std::vector<std::string> pieces = {wire::PullResponseHead(incarnation)};
  for (int32_t id : part.chunk_ids) {
    const Chunk& c = map.chunks[id];
    const int64_t bytes = c.num_elements * wire::BytesPerValue(enc);
    pieces.push_back(
        wire::ChunkHeader(wire::kPullChunksField, id, 100 + id, enc, bytes));
    std::string payload(bytes, '\0');
    wire::EncodeValues(enc, values.data() + c.flat_offset, c.num_elements,
                       payload.data());
    pieces.push_back(payload.substr(0, bytes / 3));
    pieces.push_back(payload.substr(bytes / 3));
  }
  return BufferOf(pieces);
}

TEST(PartMessagesTest, APulledPartIsReadIntoPlace) {
  const ShardMap map = MapOf({{7, 9}, {300, 12}});
  const std::vector<Part> parts = PlanParts(map, 4096, 1);
  ASSERT_EQ(parts.size(), 2u);
  const std::vector<float> want = Values(map.total_elements, 1);
  for (wire::Encoding enc : {wire::Encoding::kRawF32, wire::Encoding::kBf16}) {
    for (wire::Store store : {wire::Store::kCached, wire::Store::kStreaming}) {
      std::vector<float> params(map.total_elements, -1);
      std::vector<int64_t> versions(map.chunks.size(), -1);
      uint64_t inc = 0;
      ASSERT_TRUE(ReadPulledPart(map, parts[1],
                                 PullReply(map, parts[1], want, enc, 0xfeed),
                                 absl::MakeSpan(params), &versions, store, &inc)
                      .ok());
      EXPECT_EQ(inc, 0xfeedu);
      for (int64_t i = 0; i < map.total_elements; ++i) {
        EXPECT_EQ(params[i], i < 16 ? -1 : want[i]) << i;  // Shard 0 untouched.
      }
      EXPECT_EQ(versions, (std::vector<int64_t>{-1, -1, 102, 103}));
    }
  }
}

TEST(PartMessagesTest, AMalformedPulledPartNamesTheShard) {
  const ShardMap map = MapOf({{7, 9}, {30, 12}});
  const std::vector<Part> parts = PlanParts(map, 4096, 1);
  const std::vector<float> values = Values(map.total_elements, 0);
  std::vector<float> params(map.total_elements);
  std::vector<int64_t> versions(map.chunks.size());
  uint64_t inc = 0;
  const auto read = [&](const grpc::ByteBuffer& reply) {
    return ReadPulledPart(map, parts[1], reply, absl::MakeSpan(params),
                          &versions, wire::Store::kCached, &inc);
  };
  // Shard 0's chunks in shard 1's reply.
  absl::Status s = read(PullReply(map, parts[0], values, wire::Encoding::kRawF32, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("shard 1 returned chunk 0 that it does not own"),
            std::string::npos) << s;
  // One chunk short.
  Part fewer = parts[1];
  fewer.chunk_ids.pop_back();
  s = read(PullReply(map, fewer, values, wire::Encoding::kRawF32, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("shard 1 returned 1 chunks, expected 2"),
            std::string::npos) << s;
  // Not a message at all.
  s = read(BufferOf({"\xff\xff\xff"}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message().rfind("shard 1: ", 0), 0u) << s;
}

TEST(PartMessagesTest, DeclareRequestsCarryEachPartsInitialValues) {
  ModelLayout layout;
  layout.tensors = {{"w", {40, 30}}, {"b", {30}}};
  layout.num_shards = 2;
  layout.max_chunk_bytes = 1024;
  auto map = ComputeShardMap(layout);
  ASSERT_TRUE(map.ok()) << map.status();
  proto::ModelLayout layout_proto;
  layout_proto.set_num_shards(2);
  EXPECT_TRUE(CheckChunksFitMessages(layout, layout_proto, *map).ok());
  const std::vector<Part> parts = PlanParts(*map, 4096, 1);
  const std::vector<float> initial = Values(map->total_elements, 3);
  const std::vector<proto::DeclareModelRequest> req =
      DeclareRequests(layout_proto, *map, parts, 5, initial);
  ASSERT_EQ(req.size(), parts.size());
  for (size_t i = 0; i < req.size(); ++i) {
    EXPECT_EQ(req[i].worker_id(), 5);
    EXPECT_EQ(req[i].layout().num_shards(), 2);
    ASSERT_EQ(req[i].initial_size(), static_cast<int>(parts[i].chunk_ids.size()));
    for (int k = 0; k < req[i].initial_size(); ++k) {
      const Chunk& c = map->chunks[parts[i].chunk_ids[k]];
      EXPECT_EQ(req[i].initial(k).chunk_id(), c.id);
      EXPECT_EQ(req[i].initial(k).data(),
                std::string(reinterpret_cast<const char*>(
                                initial.data() + c.flat_offset),
                            c.num_elements * sizeof(float)));
    }
  }
}

TEST(PartMessagesTest, AChunkOverTheMessageLimitIsRefused) {
  ModelLayout layout;
  layout.tensors = {{"embedding", {20 << 20}}};
  layout.max_chunk_bytes = 128 << 20;
  auto map = ComputeShardMap(layout);
  ASSERT_TRUE(map.ok()) << map.status();
  const absl::Status s =
      CheckChunksFitMessages(layout, proto::ModelLayout(), *map);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("tensor 'embedding'"), std::string::npos) << s;
}

TEST(PartMessagesTest, APushReplyGivesItsServerIncarnation) {
  proto::PushResponse r;
  r.set_server_incarnation(0x5eed);
  uint64_t inc = 0;
  EXPECT_TRUE(ReadPushReply(BufferOf({r.SerializeAsString()}), &inc));
  EXPECT_EQ(inc, 0x5eedu);
  inc = 7;
  EXPECT_FALSE(ReadPushReply(BufferOf({"\xff\xff\xff"}), &inc));
  EXPECT_EQ(inc, 7u);
}

}  // namespace
}  // namespace downpour
