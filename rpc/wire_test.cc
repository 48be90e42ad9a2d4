#include "rpc/wire.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/codec.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.pb.h"

namespace downpour {
namespace wire {
namespace {

// Cuts `s` into pieces at random points (some empty, some one byte).
Pieces Cut(const std::string& s, uint32_t seed) {
  std::mt19937 rng(seed);
  Pieces out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = std::uniform_int_distribution<size_t>(0, 7)(rng) == 0
                   ? 0
                   : std::uniform_int_distribution<size_t>(1, 37)(rng);
    n = std::min(n, s.size() - pos);
    out.push_back(absl::string_view(s).substr(pos, n));
    pos += n;
  }
  return out;
}

std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 3);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(WireTest, ParsesWhatProtobufWritesAcrossAnyCut) {
  proto::PushRequest req;
  req.set_worker_id(3);
  req.set_seq(123456789012LL);
  req.set_part(2);
  req.set_num_parts(5);
  req.set_pull_encoding(proto::BF16);
  const std::vector<int64_t> sizes = {0, 1, 7, 1000};
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(Values(sizes[i], i));
    proto::ChunkGradient* g = req.add_gradients();
    g->set_chunk_id(static_cast<int>(10 + i));
    g->set_base_version(static_cast<int64_t>(i * 7));
    g->set_data(std::string(reinterpret_cast<const char*>(data[i].data()),
                            data[i].size() * 4));
  }
  const std::string bytes = req.SerializeAsString();
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const Pieces pieces = Cut(bytes, seed);
    absl::StatusOr<PushMessage> m = ParsePushRequest(pieces);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->worker_id, 3);
    EXPECT_EQ(m->seq, 123456789012LL);
    EXPECT_EQ(m->part, 2);
    EXPECT_EQ(m->num_parts, 5);
    EXPECT_EQ(m->pull_encoding, proto::BF16);
    ASSERT_EQ(m->chunks.size(), sizes.size());
    std::string scratch;
    std::vector<absl::string_view> storage;
    const std::vector<absl::Span<const absl::string_view>> payload =
        PayloadRanges(pieces, m->chunks, &storage);
    ASSERT_EQ(payload.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(m->chunks[i].chunk_id, static_cast<int>(10 + i));
      EXPECT_EQ(m->chunks[i].version, static_cast<int64_t>(i * 7));
      std::vector<float> out(sizes[i], -1.0f);
      ASSERT_TRUE(DecodeInto(pieces, m->chunks[i], out.data(), sizes[i],
                             &scratch).ok());
      EXPECT_EQ(out, data[i]);
      // The same payload as ranges of the pieces (no copy), concatenated.
      std::string joined;
      for (absl::string_view r : payload[i]) {
        EXPECT_FALSE(r.empty());
        joined.append(r.data(), r.size());
      }
      EXPECT_EQ(joined, std::string(reinterpret_cast<const char*>(data[i].data()),
                                    data[i].size() * 4));
    }
  }
}

TEST(WireTest, HandWrittenChunksParseWithProtobuf) {
  for (Encoding e : {Encoding::kRawF32, Encoding::kFp16, Encoding::kBf16}) {
    const std::vector<float> v = Values(513, 9);
    std::string msg;
    std::string payload(v.size() * BytesPerValue(e), '\0');
    EncodeValues(e, v.data(), static_cast<int64_t>(v.size()), payload.data());
    msg += ChunkHeader(1, 42, 99, e, static_cast<int64_t>(payload.size()));
    msg += payload;
    msg += ChunkHeader(1, 0, 0, e, 0);  // An empty chunk.
    proto::PullResponse resp;
    ASSERT_TRUE(resp.ParseFromString(msg)) << EncodingName(e);
    ASSERT_EQ(resp.chunks_size(), 2);
    EXPECT_EQ(resp.chunks(0).chunk_id(), 42);
    EXPECT_EQ(resp.chunks(0).version(), 99);
    EXPECT_EQ(static_cast<int>(resp.chunks(0).encoding()), static_cast<int>(e));
    EXPECT_EQ(resp.chunks(0).data(), payload);
    EXPECT_TRUE(resp.chunks(1).data().empty());

    // And back through our reader, cut anywhere, decoding on the way.
    absl::StatusOr<std::vector<WireChunk>> chunks =
        ParsePullResponse(Cut(msg, 5));
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    const Pieces pieces = Cut(msg, 5);
    chunks = ParsePullResponse(pieces);
    std::vector<float> out(v.size());
    std::string scratch;
    ASSERT_TRUE(DecodeInto(pieces, (*chunks)[0], out.data(),
                           static_cast<int64_t>(out.size()), &scratch).ok());
    const double bound = e == Encoding::kRawF32 ? 0
                         : e == Encoding::kFp16 ? std::ldexp(1.0, -11)
                                                : std::ldexp(1.0, -8);
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_LE(std::abs(out[i] - v[i]), bound * std::abs(v[i]) + 1e-7)
          << EncodingName(e) << " element " << i;
    }
  }
}

// The writer's push, as the client sends it (heads, then each payload as
// its own piece), read back by ParsePushRequest and by protobuf.
TEST(WireTest, WrittenPushRoundTripsThroughBothParsers) {
  for (Encoding e : {Encoding::kRawF32, Encoding::kFp16, Encoding::kBf16}) {
    for (bool push_pull : {false, true}) {
      PushHead head;
      head.worker_id = 7;
      head.seq = int64_t{1} << 40;
      head.part = 3;
      head.num_parts = 4;
      if (push_pull) head.pull_encoding = Encoding::kFp16;
      // The incarnation (field 8) uses all 64 bits.
      head.incarnation = push_pull ? 0xfedcba9876543210ull : 0;
      head.pull_min_version = push_pull ? int64_t{1} << 35 : 0;
      std::string bytes;
      AppendPushHead(head, &bytes);
      const std::vector<int64_t> sizes = {5, 0, 1, 300};
      std::vector<std::vector<float>> values;
      for (size_t i = 0; i < sizes.size(); ++i) {
        values.push_back(Values(sizes[i], static_cast<uint32_t>(i + 20)));
        std::string payload(sizes[i] * BytesPerValue(e), '\0');
        EncodeValues(e, values[i].data(), sizes[i], payload.data());
        AppendChunkHeader(kPushGradientsField, static_cast<int32_t>(100 + i),
                          static_cast<int64_t>(i * 1000), e,
                          static_cast<int64_t>(payload.size()), &bytes);
        bytes += payload;
      }

      proto::PushRequest req;
      ASSERT_TRUE(req.ParseFromString(bytes)) << EncodingName(e);
      EXPECT_EQ(req.worker_id(), 7);
      EXPECT_EQ(req.seq(), int64_t{1} << 40);
      EXPECT_EQ(req.part(), 3);
      EXPECT_EQ(req.num_parts(), 4);
      EXPECT_FALSE(req.leave());
      EXPECT_EQ(req.pull_encoding(), push_pull ? proto::FP16 : proto::RAW_F32);
      EXPECT_EQ(req.incarnation(), head.incarnation);
      EXPECT_EQ(req.pull_min_version(), head.pull_min_version);
      ASSERT_EQ(req.gradients_size(), static_cast<int>(sizes.size()));

      for (uint32_t seed : {1u, 2u, 3u}) {
        const Pieces pieces = Cut(bytes, seed);
        absl::StatusOr<PushMessage> m = ParsePushRequest(pieces);
        ASSERT_TRUE(m.ok()) << m.status();
        EXPECT_EQ(m->worker_id, 7);
        EXPECT_EQ(m->seq, int64_t{1} << 40);
        EXPECT_EQ(m->part, 3);
        EXPECT_EQ(m->num_parts, 4);
        EXPECT_EQ(m->pull_encoding, push_pull ? 1 : 0);
        EXPECT_EQ(m->incarnation, head.incarnation);
        EXPECT_EQ(m->pull_min_version, head.pull_min_version);
        ASSERT_EQ(m->chunks.size(), sizes.size());
        std::string scratch;
        for (size_t i = 0; i < sizes.size(); ++i) {
          const WireChunk& c = m->chunks[i];
          EXPECT_EQ(c.chunk_id, req.gradients(i).chunk_id());
          EXPECT_EQ(c.chunk_id, static_cast<int32_t>(100 + i));
          EXPECT_EQ(c.version, req.gradients(i).base_version());
          EXPECT_EQ(c.version, static_cast<int64_t>(i * 1000));
          EXPECT_EQ(c.encoding, e);
          EXPECT_EQ(static_cast<int>(req.gradients(i).encoding()),
                    static_cast<int>(e));
          std::vector<float> out(sizes[i]), via_proto(sizes[i]);
          ASSERT_TRUE(
              DecodeInto(pieces, c, out.data(), sizes[i], &scratch).ok());
          const std::string& data = req.gradients(i).data();
          const Pieces whole{data};
          WireChunk at_start = c;
          at_start.data = DataRef{0, 0, static_cast<int64_t>(data.size())};
          ASSERT_TRUE(DecodeInto(whole, at_start, via_proto.data(), sizes[i],
                                 &scratch).ok());
          EXPECT_EQ(out, via_proto);
          if (e == Encoding::kRawF32) {
            EXPECT_EQ(out, values[i]);
          }
        }
      }
    }
  }
}

// A push naming a shared-memory region (field 10): what the hand-written
// writer puts there protobuf reads, what protobuf writes there the
// hand-written reader reads, across any cut, with a negative fd and
// 64-bit values; a truncated region is refused.
TEST(WireTest, SharedRegionOfAPushRoundTripsWithProtobuf) {
  PushHead head;
  head.worker_id = 1;
  head.seq = 9;
  head.shared = SharedRef{0xfffffff0u, -3, 0xfedcba9876543210ull,
                          uint64_t{1} << 41, 4096, (uint64_t{1} << 40) + 4096};
  std::string bytes;
  AppendPushHead(head, &bytes);
  AppendChunkHeader(kPushGradientsField, 4, 2, Encoding::kRawF32, 0, &bytes);
  proto::PushRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  ASSERT_TRUE(req.has_shared());
  EXPECT_EQ(req.shared().pid(), 0xfffffff0u);
  EXPECT_EQ(req.shared().fd(), -3);
  EXPECT_EQ(req.shared().key(), 0xfedcba9876543210ull);
  EXPECT_EQ(req.shared().size(), uint64_t{1} << 41);
  EXPECT_EQ(req.shared().push_offset(), 4096u);
  EXPECT_EQ(req.shared().reply_offset(), (uint64_t{1} << 40) + 4096);
  ASSERT_EQ(req.gradients_size(), 1);
  EXPECT_TRUE(req.gradients(0).data().empty());
  for (const std::string& msg : {bytes, req.SerializeAsString()}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      absl::StatusOr<PushMessage> m = ParsePushRequest(Cut(msg, seed));
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_TRUE(m->shared.has_value());
      EXPECT_EQ(m->shared->pid, head.shared->pid);
      EXPECT_EQ(m->shared->fd, -3);
      EXPECT_EQ(m->shared->key, head.shared->key);
      EXPECT_EQ(m->shared->size, head.shared->size);
      EXPECT_EQ(m->shared->push_offset, head.shared->push_offset);
      EXPECT_EQ(m->shared->reply_offset, head.shared->reply_offset);
      ASSERT_EQ(m->chunks.size(), 1u);
      EXPECT_EQ(m->chunks[0].data.size, 0);
    }
  }
  const size_t at = bytes.find('\x52');  // Field 10's tag, length-delimited.
  ASSERT_NE(at, std::string::npos);
  EXPECT_FALSE(ParsePushRequest(Pieces{bytes.substr(0, at + 4)}).ok());
  PushHead plain;
  std::string none;
  AppendPushHead(plain, &none);
  EXPECT_FALSE(ParsePushRequest(Pieces{none})->shared.has_value());
}

TEST(WireTest, ValuesInSharedMemoryRoundTripWithProtobuf) {
  std::string msg = PullResponseHead(5, /*values_shared=*/true);
  msg += ChunkHeader(1, 3, 7, Encoding::kRawF32, 0);
  proto::PullResponse resp;
  ASSERT_TRUE(resp.ParseFromString(msg));
  EXPECT_TRUE(resp.values_in_shared_memory());
  EXPECT_EQ(resp.server_incarnation(), 5u);
  bool shared = false;
  uint64_t inc = 0;
  ASSERT_TRUE(ParsePullResponse(Pieces{msg}, &inc, &shared).ok());
  EXPECT_TRUE(shared);
  resp.set_values_in_shared_memory(false);
  ASSERT_TRUE(ParsePullResponse(Pieces{resp.SerializeAsString()}, &inc, &shared).ok());
  EXPECT_FALSE(shared);
  EXPECT_EQ(PullResponseHead(0, true), std::string("\x58\x01", 2));
}

// The head alone (a part with no chunks) and a head whose fields are all
// zero still carry every field but pull_encoding, as before.
TEST(WireTest, PushHeadWritesZeroFieldsAndPullEncodingOnlyWhenSet) {
  std::string bytes;
  AppendPushHead(PushHead(), &bytes);
  EXPECT_EQ(bytes, std::string("\x08\x00\x10\x00\x28\x00\x30\x00", 8));
  PushHead h;
  h.pull_encoding = Encoding::kRawF32;
  std::string with;
  AppendPushHead(h, &with);
  EXPECT_EQ(with, bytes + std::string("\x38\x00", 2));
  absl::StatusOr<PushMessage> m = ParsePushRequest(Pieces{with});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->chunks.empty());
}

// Chunk headers with extreme ids and versions, as protobuf writes them.
TEST(WireTest, ChunkHeaderMatchesProtobufAtTheLimits) {
  for (int64_t version : {int64_t{0}, int64_t{1}, int64_t{-1},
                          std::numeric_limits<int64_t>::max()}) {
    for (int32_t id : {0, 127, 128, std::numeric_limits<int32_t>::max()}) {
      proto::PullResponse want;
      proto::ChunkValues* c = want.add_chunks();
      c->set_chunk_id(id);
      c->set_version(version);
      c->set_encoding(proto::BF16);
      c->set_data("abcd");
      // protobuf skips zero fields; ours always writes them, which parses
      // the same.
      const std::string ours =
          ChunkHeader(kPullChunksField, id, version, Encoding::kBf16, 4) +
          "abcd";
      proto::PullResponse got;
      ASSERT_TRUE(got.ParseFromString(ours));
      EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString())
          << id << " " << version;
      std::string appended = "x";
      AppendChunkHeader(kPullChunksField, id, version, Encoding::kBf16, 4,
                        &appended);
      EXPECT_EQ(appended, "x" + ours.substr(0, ours.size() - 4));
    }
  }
}

TEST(WireTest, RejectsMalformedMessagesWithoutReadingPastTheEnd) {
  proto::PushRequest req;
  req.set_worker_id(1);
  req.set_seq(2);
  req.add_gradients()->set_data(std::string(400, 'x'));
  const std::string good = req.SerializeAsString();
  // Every truncation is either a valid shorter message or an error; none
  // may crash or report a payload beyond the bytes present.
  for (size_t len = 0; len < good.size(); ++len) {
    const std::string cut = good.substr(0, len);
    absl::StatusOr<PushMessage> m = ParsePushRequest(Pieces{cut});
    if (m.ok()) {
      for (const WireChunk& c : m->chunks) {
        EXPECT_LE(static_cast<size_t>(c.data.size), len);
      }
    }
  }
  // A truncated gradient payload is refused.
  EXPECT_FALSE(ParsePushRequest(Pieces{good.substr(0, good.size() - 1)}).ok());
  // Unknown encoding.
  std::string bad = ChunkHeader(3, 0, 0, Encoding::kRawF32, 0);
  bad.insert(bad.size() - 2, "\x20\x07");  // encoding = 7
  bad[1] = static_cast<char>(bad[1] + 2);
  absl::StatusOr<PushMessage> m = ParsePushRequest(Pieces{bad});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("encoding"), std::string::npos);
  // Garbage.
  EXPECT_FALSE(ParsePushRequest(Pieces{std::string("\xff\xff\xff", 3)}).ok());
  // A wrong-sized payload for the expected element count.
  const std::string one = ChunkHeader(1, 0, 0, Encoding::kFp16, 3) + "abc";
  const Pieces pieces{one};
  absl::StatusOr<std::vector<WireChunk>> chunks = ParsePullResponse(pieces);
  ASSERT_TRUE(chunks.ok());
  float out[2];
  std::string scratch;
  EXPECT_FALSE(DecodeInto(pieces, (*chunks)[0], out, 2, &scratch).ok());
}

// Field number 0 is not protobuf; the bytes
// "00 01" before a valid push were parsed and the push applied. Both parsers
// now refuse it, as protobuf's generated parser does, at the top level and
// inside a chunk; so is a tag above 32 bits (it used to be truncated into a
// field number).
TEST(WireTest, FieldNumberZeroAndOversizedTagsAreRefusedLikeProtobuf) {
  proto::PushRequest req;
  req.set_worker_id(1);
  req.set_seq(2);
  req.add_gradients()->set_data(std::string(8, 'x'));
  const std::string good = req.SerializeAsString();
  ASSERT_TRUE(ParsePushRequest(Pieces{good}).ok());
  const std::string zero = std::string("\x00\x01", 2) + good;
  proto::PushRequest generated;
  EXPECT_FALSE(generated.ParseFromString(zero));  // What protobuf does.
  absl::StatusOr<PushMessage> m = ParsePushRequest(Pieces{zero});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("field number 0"), std::string::npos)
      << m.status();
  // Field 0 with another wire type, and inside a chunk.
  EXPECT_FALSE(ParsePushRequest(Pieces{std::string("\x02\x00", 2) + good}).ok());
  std::string chunk = ChunkHeader(3, 0, 0, Encoding::kRawF32, 0);
  chunk.insert(2, std::string("\x00\x05", 2));
  chunk[1] = static_cast<char>(chunk[1] + 2);
  EXPECT_FALSE(generated.ParseFromString(chunk));
  EXPECT_FALSE(ParsePushRequest(Pieces{chunk}).ok());
  std::string pulled = ChunkHeader(1, 0, 0, Encoding::kRawF32, 0);
  pulled.insert(0, std::string("\x00\x00", 2));
  EXPECT_FALSE(ParsePullResponse(Pieces{pulled}).ok());
  // A tag of 2^35 + 8 (varint, "field" 2^32 + 1): truncated to int it
  // would have read as field 1.
  std::string big;
  uint64_t tag = (uint64_t{1} << 35) | (1 << 3);
  while (tag >= 0x80) {
    big.push_back(static_cast<char>((tag & 0x7f) | 0x80));
    tag >>= 7;
  }
  big.push_back(static_cast<char>(tag));
  big.push_back('\x07');
  EXPECT_FALSE(generated.ParseFromString(big));
  EXPECT_FALSE(ParsePushRequest(Pieces{big}).ok());
}

TEST(WireTest, UnknownFieldsAreSkipped) {
  std::string msg;
  PutVarintField(1, 4, &msg);
  PutVarintField(99, 12345, &msg);  // A field from a newer client.
  msg += "\x9a\x06\x03" "abc";        // field 99, length-delimited
  PutVarintField(2, 8, &msg);
  absl::StatusOr<PushMessage> m = ParsePushRequest(Pieces{msg});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->worker_id, 4);
  EXPECT_EQ(m->seq, 8);
}

TEST(WireTest, EncodingNames) {
  EXPECT_EQ(*ParseEncoding("fp16"), Encoding::kFp16);
  EXPECT_EQ(*ParseEncoding("bf16"), Encoding::kBf16);
  EXPECT_EQ(*ParseEncoding("f32"), Encoding::kRawF32);
  EXPECT_FALSE(ParseEncoding("int8").ok());
}

TEST(WireTest, StreamingCopyEqualsMemcpyAtEveryAlignmentAndSize) {
  std::string src(5000, '\0');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 7);
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257},
                   size_t{1000}, size_t{4095}, size_t{4096}}) {
    for (size_t src_off : {0, 1, 3, 8, 15}) {
      for (size_t dst_off : {0, 1, 5, 16, 63}) {
        for (Store store : {Store::kCached, Store::kStreaming}) {
          std::string dst(n + 128, '#');
          CopyBytes(dst.data() + dst_off, src.data() + src_off, n, store);
          // Exactly n bytes written, nothing before or after them.
          EXPECT_EQ(dst.substr(0, dst_off), std::string(dst_off, '#'));
          EXPECT_EQ(dst.substr(dst_off, n), src.substr(src_off, n))
              << n << " " << src_off << " " << dst_off;
          EXPECT_EQ(dst.substr(dst_off + n), std::string(128 - dst_off, '#'));
        }
      }
    }
  }
}

// PullResponse.server_incarnation, written before the chunks (and
// read wherever it stands, the last one winning, as protobuf does).
TEST(WireTest, PullResponseServerIncarnationRoundTripsWithProtobuf) {
  const uint64_t inc = 0xfedcba9876543210ULL;
  const std::vector<float> v = Values(33, 2);
  std::string msg = PullResponseHead(inc);
  msg += ChunkHeader(1, 5, 7, Encoding::kRawF32,
                     static_cast<int64_t>(v.size() * 4));
  msg.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  proto::PullResponse resp;
  ASSERT_TRUE(resp.ParseFromString(msg));
  EXPECT_EQ(resp.server_incarnation(), inc);
  ASSERT_EQ(resp.chunks_size(), 1);
  EXPECT_EQ(resp.chunks(0).version(), 7);
  for (int seed : {1, 3, 5}) {
    uint64_t got = 0;
    absl::StatusOr<std::vector<WireChunk>> chunks =
        ParsePullResponse(Cut(msg, seed), &got);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    EXPECT_EQ(got, inc);
    ASSERT_EQ(chunks->size(), 1u);
    EXPECT_EQ((*chunks)[0].chunk_id, 5);
  }
  // Protobuf's own encoding, the field after the chunks, parses alike.
  resp.set_server_incarnation(42);
  uint64_t got = 0;
  ASSERT_TRUE(ParsePullResponse(Pieces{resp.SerializeAsString()}, &got).ok());
  EXPECT_EQ(got, 42u);
  EXPECT_TRUE(PullResponseHead(0).empty());  // An old server's reply.
  ASSERT_TRUE(ParsePullResponse(Pieces{msg.substr(PullResponseHead(inc).size())},
                                &got).ok());
  EXPECT_EQ(got, 0u);
  // A truncated incarnation is refused.
  EXPECT_FALSE(ParsePullResponse(Pieces{PullResponseHead(inc).substr(0, 4)}).ok());
}

TEST(WireTest, DestinationsFromTheThresholdUpStream) {
  EXPECT_EQ(StoreFor(31, 32), Store::kCached);
  EXPECT_EQ(StoreFor(32, 32), Store::kStreaming);
  EXPECT_EQ(StoreFor(0, 0), Store::kStreaming);
}

TEST(WireTest, StreamingDecodeEqualsCachedDecodeAcrossAnyCut) {
  const std::vector<float> v = Values(3 * 1024 + 5, 4);
  std::string msg = ChunkHeader(1, 3, 1, Encoding::kRawF32,
                                static_cast<int64_t>(v.size() * 4));
  msg.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  for (size_t cut : {size_t{1}, size_t{7}, size_t{300}, size_t{4099}, msg.size()}) {
    Pieces pieces;
    for (size_t at = 0; at < msg.size(); at += cut) {
      pieces.push_back(absl::string_view(msg).substr(at, cut));
    }
    absl::StatusOr<std::vector<WireChunk>> chunks = ParsePullResponse(pieces);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    ASSERT_EQ(chunks->size(), 1u);
    std::string scratch;
    // Destination offset by one float so the streamed stores start unaligned.
    std::vector<float> out(v.size() + 1, -1.0f);
    ASSERT_TRUE(DecodeInto(pieces, (*chunks)[0], out.data() + 1,
                           static_cast<int64_t>(v.size()), &scratch,
                           Store::kStreaming)
                    .ok());
    EXPECT_EQ(out[0], -1.0f);
    EXPECT_EQ(std::vector<float>(out.begin() + 1, out.end()), v) << cut;
  }
}

}  // namespace
}  // namespace wire
}  // namespace downpour
