#include "rpc/wire.h"

#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/status_macros.h"

namespace downpour {
namespace wire {
namespace {

constexpr int kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;

// Immutable, stateless codecs shared by every caller.
const Codec& CodecFor(Encoding e) {
  static const Codec* const kFp16 = CreateCodec("fp16")->release();
  static const Codec* const kBf16 = CreateCodec("bf16")->release();
  return e == Encoding::kFp16 ? *kFp16 : *kBf16;
}

// A read position in a message spread over pieces, bounded by `left` bytes.
class Cursor {
 public:
  Cursor(const Pieces& p, size_t piece, size_t offset, int64_t left)
      : p_(&p), piece_(piece), offset_(offset), left_(left) {
    Normalize();
  }
  int64_t left() const { return left_; }
  DataRef Here(int64_t size) const { return DataRef{piece_, offset_, size}; }

  bool ReadByte(uint8_t* b) {
    if (left_ <= 0) return false;
    *b = static_cast<uint8_t>((*p_)[piece_][offset_]);
    Advance(1);
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // More than 10 bytes.
  }
  bool Skip(int64_t n) {
    if (n < 0 || n > left_) return false;
    Advance(n);
    return true;
  }
  // A cursor over the next n bytes; this one moves past them.
  bool Sub(int64_t n, Cursor* sub) {
    if (n < 0 || n > left_) return false;
    *sub = Cursor(*p_, piece_, offset_, n);
    Advance(n);
    return true;
  }

 private:
  void Advance(int64_t n) {
    left_ -= n;
    while (n > 0) {
      const int64_t here =
          static_cast<int64_t>((*p_)[piece_].size() - offset_);
      if (n < here) {
        offset_ += n;
        n = 0;
      } else {
        n -= here;
        ++piece_;
        offset_ = 0;
      }
    }
    Normalize();
  }
  // Moves past empty pieces and piece ends so (piece_, offset_) is a byte.
  void Normalize() {
    while (left_ > 0 && piece_ < p_->size() &&
           offset_ >= (*p_)[piece_].size()) {
      ++piece_;
      offset_ = 0;
    }
  }

  const Pieces* p_;
  size_t piece_;
  size_t offset_;
  int64_t left_;
};

absl::Status Malformed(absl::string_view what, absl::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", what, ": ", detail));
}

int64_t TotalBytes(const Pieces& pieces) {
  int64_t n = 0;
  for (absl::string_view p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

// Reads a field's tag. Like protobuf's parser, refuses field number 0 (which
// protobuf forbids) and a tag that does not fit 32 bits (field numbers end
// at 2^29 - 1), so a huge tag cannot be truncated into a known field number.
// A tag is at most 5 bytes long, as protobuf reads it: an over-long encoding
// (say f9 ff ff ff 80 00, padded with a continuation byte) is refused there,
// so it is refused here too (found by wire_fuzzer: the hand-written reader
// accepted a push protobuf refuses).
absl::Status ReadTag(Cursor* c, absl::string_view what, int* field, int* type) {
  constexpr int kMaxTagBytes = 5;
  uint64_t tag = 0;
  for (int i = 0;; ++i) {
    uint8_t b;
    if (!c->ReadByte(&b)) return Malformed(what, "truncated tag");
    if (i == kMaxTagBytes) return Malformed(what, "tag longer than 5 bytes");
    tag |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) break;
  }
  if (tag > 0xffffffffu) {
    return Malformed(what, absl::StrCat("tag ", tag, " above 2^32"));
  }
  *field = static_cast<int>(tag >> 3);
  *type = static_cast<int>(tag & 7);
  if (*field == 0) return Malformed(what, "field number 0");
  return absl::OkStatus();
}

// Skips one field of wire type `type`.
bool SkipField(Cursor* c, int type) {
  uint64_t v;
  switch (type) {
    case kVarint:
      return c->ReadVarint(&v);
    case kFixed64:
      return c->Skip(8);
    case kFixed32:
      return c->Skip(4);
    case kLen:
      return c->ReadVarint(&v) && v <= static_cast<uint64_t>(c->left()) &&
             c->Skip(static_cast<int64_t>(v));
    default:
      return false;  // Groups are not part of proto3.
  }
}

absl::StatusOr<WireChunk> ParseChunk(Cursor c, absl::string_view what) {
  WireChunk out;
  bool have_data = false;
  while (c.left() > 0) {
    uint64_t v;
    int field, type;
    DP_RETURN_IF_ERROR(ReadTag(&c, what, &field, &type));
    if (field == 1 && type == kVarint) {
      if (!c.ReadVarint(&v)) return Malformed(what, "truncated chunk_id");
      if (static_cast<int64_t>(v) < 0 || v > 0x7fffffff) {
        return Malformed(what, absl::StrCat("chunk_id ", static_cast<int64_t>(v),
                                            " out of range"));
      }
      out.chunk_id = static_cast<int32_t>(v);
    } else if (field == 2 && type == kVarint) {
      if (!c.ReadVarint(&v)) return Malformed(what, "truncated version");
      out.version = static_cast<int64_t>(v);
    } else if (field == 4 && type == kVarint) {
      if (!c.ReadVarint(&v)) return Malformed(what, "truncated encoding");
      if (v > 2) {
        return Malformed(what, absl::StrCat("unknown payload encoding ", v,
                                            " (known: 0 f32, 1 fp16, 2 bf16)"));
      }
      out.encoding = static_cast<Encoding>(v);
    } else if (field == 3 && type == kLen) {
      if (!c.ReadVarint(&v) || v > static_cast<uint64_t>(c.left())) {
        return Malformed(what, "payload runs past the end of its chunk");
      }
      // A repeated occurrence replaces the earlier one, as protobuf does.
      out.data = c.Here(static_cast<int64_t>(v));
      c.Skip(static_cast<int64_t>(v));
      have_data = true;
    } else if (!SkipField(&c, type)) {
      return Malformed(what, absl::StrCat("bad field ", field, " type ", type));
    }
  }
  if (!have_data) out.data = DataRef{0, 0, 0};
  return out;
}

// A SharedMemory submessage (varint fields 1 to 6) merged into `r`, as
// protobuf merges a repeated submessage field.
absl::StatusOr<SharedRef> ParseSharedRef(Cursor c, absl::string_view what,
                                         SharedRef r) {
  while (c.left() > 0) {
    uint64_t v;
    int field, type;
    DP_RETURN_IF_ERROR(ReadTag(&c, what, &field, &type));
    if (type == kVarint && field >= 1 && field <= 6) {
      if (!c.ReadVarint(&v)) return Malformed(what, "truncated shared field");
      switch (field) {
        case 1:
          r.pid = static_cast<uint32_t>(v);
          break;
        case 2:
          r.fd = static_cast<int32_t>(v);
          break;
        case 3:
          r.key = v;
          break;
        case 4:
          r.size = v;
          break;
        case 5:
          r.push_offset = v;
          break;
        case 6:
          r.reply_offset = v;
          break;
      }
    } else if (!SkipField(&c, type)) {
      return Malformed(what, absl::StrCat("bad shared field ", field, " type ", type));
    }
  }
  return r;
}

}  // namespace

absl::StatusOr<Encoding> ParseEncoding(absl::string_view name) {
  if (name == "f32" || name == "none" || name == "fp32") {
    return Encoding::kRawF32;
  }
  if (name == "fp16") return Encoding::kFp16;
  if (name == "bf16") return Encoding::kBf16;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown wire encoding '", name, "' (known: f32, fp16, bf16)"));
}

const char* EncodingName(Encoding e) {
  switch (e) {
    case Encoding::kFp16:
      return "fp16";
    case Encoding::kBf16:
      return "bf16";
    default:
      return "f32";
  }
}

int BytesPerValue(Encoding e) { return e == Encoding::kRawF32 ? 4 : 2; }

namespace {

// Writes v at p (at most 10 bytes); returns the end.
char* PutVarintTo(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

}  // namespace

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutVarintField(int field, uint64_t v, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | kVarint, out);
  PutVarint(v, out);
}

void AppendPushHead(const PushHead& head, std::string* out) {
  PutVarintField(1, static_cast<uint64_t>(head.worker_id), out);
  PutVarintField(2, static_cast<uint64_t>(head.seq), out);
  PutVarintField(5, static_cast<uint64_t>(head.part), out);
  PutVarintField(6, static_cast<uint64_t>(head.num_parts), out);
  if (head.pull_encoding.has_value()) {
    PutVarintField(7, static_cast<uint64_t>(*head.pull_encoding), out);
  }
  if (head.incarnation != 0) PutVarintField(8, head.incarnation, out);
  if (head.pull_min_version != 0) {
    PutVarintField(9, static_cast<uint64_t>(head.pull_min_version), out);
  }
  if (head.shared.has_value()) {
    const SharedRef& r = *head.shared;
    std::string inner;
    PutVarintField(1, r.pid, &inner);
    PutVarintField(2, static_cast<uint64_t>(static_cast<int64_t>(r.fd)), &inner);
    PutVarintField(3, r.key, &inner);
    PutVarintField(4, r.size, &inner);
    PutVarintField(5, r.push_offset, &inner);
    PutVarintField(6, r.reply_offset, &inner);
    PutVarint(static_cast<uint64_t>(kPushSharedField) << 3 | 2, out);
    PutVarint(inner.size(), out);
    out->append(inner);
  }
}

void AppendChunkHeader(int outer_field, int32_t chunk_id, int64_t version,
                       Encoding encoding, int64_t data_bytes, std::string* out) {
  // The submessage's fields before its payload (at most 4 tags of 1 byte
  // and 4 varints of at most 10), written on the stack first to learn their
  // length.
  char inner[48];
  char* p = inner;
  *p++ = static_cast<char>(1 << 3 | kVarint);
  p = PutVarintTo(static_cast<uint64_t>(chunk_id), p);
  *p++ = static_cast<char>(2 << 3 | kVarint);
  p = PutVarintTo(static_cast<uint64_t>(version), p);
  if (encoding != Encoding::kRawF32) {
    *p++ = static_cast<char>(4 << 3 | kVarint);
    p = PutVarintTo(static_cast<uint64_t>(encoding), p);
  }
  *p++ = static_cast<char>(3 << 3 | kLen);
  p = PutVarintTo(static_cast<uint64_t>(data_bytes), p);
  const size_t inner_size = static_cast<size_t>(p - inner);
  PutVarint(static_cast<uint64_t>(outer_field) << 3 | kLen, out);
  PutVarint(inner_size + static_cast<uint64_t>(data_bytes), out);
  out->append(inner, inner_size);
}

std::string ChunkHeader(int outer_field, int32_t chunk_id, int64_t version,
                        Encoding encoding, int64_t data_bytes) {
  std::string out;
  AppendChunkHeader(outer_field, chunk_id, version, encoding, data_bytes, &out);
  return out;
}

absl::StatusOr<PushMessage> ParsePushRequest(const Pieces& pieces) {
  constexpr absl::string_view kWhat = "PushRequest";
  PushMessage m;
  Cursor c(pieces, 0, 0, TotalBytes(pieces));
  while (c.left() > 0) {
    uint64_t v;
    int field, type;
    DP_RETURN_IF_ERROR(ReadTag(&c, kWhat, &field, &type));
    if (type == kVarint && field >= 1 && field <= 9 && field != 3) {
      if (!c.ReadVarint(&v)) return Malformed(kWhat, "truncated varint");
      switch (field) {
        case 1:
          m.worker_id = static_cast<int32_t>(v);
          break;
        case 2:
          m.seq = static_cast<int64_t>(v);
          break;
        case 4:
          m.leave = v != 0;
          break;
        case 5:
          m.part = static_cast<int32_t>(v);
          break;
        case 6:
          m.num_parts = static_cast<int32_t>(v);
          break;
        case 7:
          m.pull_encoding = static_cast<int64_t>(v);
          break;
        case 8:
          m.incarnation = v;
          break;
        case 9:
          m.pull_min_version = static_cast<int64_t>(v);
          break;
      }
    } else if (field == 3 && type == kLen) {
      Cursor sub = c;
      if (!c.ReadVarint(&v) || !c.Sub(static_cast<int64_t>(v), &sub) ||
          v > static_cast<uint64_t>(INT64_MAX)) {
        return Malformed(kWhat, "gradient runs past the end of the message");
      }
      absl::StatusOr<WireChunk> chunk = ParseChunk(sub, kWhat);
      if (!chunk.ok()) return chunk.status();
      m.chunks.push_back(*chunk);
    } else if (field == kPushSharedField && type == kLen) {
      Cursor sub = c;
      if (!c.ReadVarint(&v) || v > static_cast<uint64_t>(INT64_MAX) ||
          !c.Sub(static_cast<int64_t>(v), &sub)) {
        return Malformed(kWhat, "shared runs past the end of the message");
      }
      absl::StatusOr<SharedRef> ref =
          ParseSharedRef(sub, kWhat, m.shared.value_or(SharedRef()));
      if (!ref.ok()) return ref.status();
      m.shared = *ref;
    } else if (!SkipField(&c, type)) {
      return Malformed(kWhat, absl::StrCat("bad field ", field, " type ", type));
    }
  }
  return m;
}

std::string PullResponseHead(uint64_t server_incarnation, bool values_shared) {
  std::string out;
  if (server_incarnation != 0) {
    PutVarintField(kPullServerIncarnationField, server_incarnation, &out);
  }
  if (values_shared) PutVarintField(kPullValuesSharedField, 1, &out);
  return out;
}

absl::StatusOr<std::vector<WireChunk>> ParsePullResponse(
    const Pieces& pieces, uint64_t* server_incarnation, bool* values_shared) {
  constexpr absl::string_view kWhat = "PullResponse";
  std::vector<WireChunk> chunks;
  if (server_incarnation != nullptr) *server_incarnation = 0;
  if (values_shared != nullptr) *values_shared = false;
  Cursor c(pieces, 0, 0, TotalBytes(pieces));
  while (c.left() > 0) {
    uint64_t v;
    int field, type;
    DP_RETURN_IF_ERROR(ReadTag(&c, kWhat, &field, &type));
    if (field == 1 && type == kLen) {
      Cursor sub = c;
      if (!c.ReadVarint(&v) || v > static_cast<uint64_t>(INT64_MAX) ||
          !c.Sub(static_cast<int64_t>(v), &sub)) {
        return Malformed(kWhat, "chunk runs past the end of the message");
      }
      absl::StatusOr<WireChunk> chunk = ParseChunk(sub, kWhat);
      if (!chunk.ok()) return chunk.status();
      chunks.push_back(*chunk);
    } else if (field == kPullServerIncarnationField && type == kVarint) {
      if (!c.ReadVarint(&v)) {
        return Malformed(kWhat, "server_incarnation runs past the end");
      }
      if (server_incarnation != nullptr) *server_incarnation = v;
    } else if (field == kPullValuesSharedField && type == kVarint) {
      if (!c.ReadVarint(&v)) {
        return Malformed(kWhat, "values_in_shared_memory runs past the end");
      }
      if (values_shared != nullptr) *values_shared = v != 0;
    } else if (!SkipField(&c, type)) {
      return Malformed(kWhat, absl::StrCat("bad field ", field, " type ", type));
    }
  }
  return chunks;
}

namespace {

// Calls fn(range) for each non-empty byte range of `ref`, in order.
template <typename Fn>
void ForEachRange(const Pieces& pieces, const DataRef& ref, Fn&& fn) {
  int64_t left = ref.size;
  size_t piece = ref.piece, offset = ref.offset;
  while (left > 0) {
    const absl::string_view p = pieces[piece];
    const int64_t n =
        std::min<int64_t>(left, static_cast<int64_t>(p.size() - offset));
    if (n > 0) fn(p.substr(offset, static_cast<size_t>(n)));
    left -= n;
    ++piece;
    offset = 0;
  }
}

}  // namespace

void CopyBytes(char* dst, const char* src, size_t n, Store store) {
#if defined(__SSE2__)
  if (store == Store::kStreaming && n >= 256) {
    // Plain copy up to a 16-byte aligned destination, stream the middle,
    // plain copy of the tail; the fence orders the streamed stores before
    // whatever the caller publishes next (e.g. "this pull is done").
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    _mm_sfence();
    return;
  }
#endif
  (void)store;
  std::memcpy(dst, src, n);
}

void Gather(const Pieces& pieces, const DataRef& ref, char* dst, Store store) {
  ForEachRange(pieces, ref, [&](absl::string_view r) {
    CopyBytes(dst, r.data(), r.size(), store);
    dst += r.size();
  });
}

std::vector<absl::Span<const absl::string_view>> PayloadRanges(
    const Pieces& pieces, absl::Span<const WireChunk> chunks,
    std::vector<absl::string_view>* storage) {
  storage->clear();
  std::vector<size_t> first(chunks.size() + 1, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    first[i] = storage->size();
    ForEachRange(pieces, chunks[i].data,
                 [&](absl::string_view r) { storage->push_back(r); });
  }
  first[chunks.size()] = storage->size();
  // Spans only now that *storage has stopped growing.
  std::vector<absl::Span<const absl::string_view>> out(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    out[i] = absl::MakeConstSpan(*storage).subspan(first[i], first[i + 1] - first[i]);
  }
  return out;
}

absl::Status DecodeInto(const Pieces& pieces, const WireChunk& c, float* dst,
                        int64_t n, std::string* scratch, Store store) {
  const int64_t want = n * BytesPerValue(c.encoding);
  if (c.data.size != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c.chunk_id, " needs ", want, " bytes (", n, " values as ",
        EncodingName(c.encoding), "), got ", c.data.size));
  }
  if (c.encoding == Encoding::kRawF32) {
    Gather(pieces, c.data, reinterpret_cast<char*>(dst), store);
    return absl::OkStatus();
  }
  const char* src;
  if (want == 0) return absl::OkStatus();
  const absl::string_view first = pieces[c.data.piece];
  if (static_cast<int64_t>(first.size() - c.data.offset) >= want) {
    src = first.data() + c.data.offset;  // In one piece: decode in place.
  } else {
    scratch->resize(static_cast<size_t>(want));
    Gather(pieces, c.data, scratch->data());
    src = scratch->data();
  }
  return CodecFor(c.encoding).Decode(src, want, dst, n);
}

void EncodeValues(Encoding e, const float* src, int64_t n, char* dst) {
  // An empty chunk may come with null pointers (an empty vector's data()),
  // which memcpy must not be given even for zero bytes.
  if (n == 0) return;
  if (e == Encoding::kRawF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    CodecFor(e).Encode(src, n, dst);
  }
}

}  // namespace wire
}  // namespace downpour
