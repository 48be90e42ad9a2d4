// File: rpc/wire.h
//
// The bulk messages of proto/parameter_server.proto (PushRequest and
// PullResponse) written and read by hand, so tensor payloads are never copied
// into or out of protobuf strings. The output is exactly the protobuf
// encoding of those messages (any protobuf library parses it), and the reader
// accepts any valid encoding of them (fields in any order, unknown fields
// skipped). Nothing here depends on gRPC: a message is a list of byte pieces
// (the slices of a grpc::ByteBuffer), and payloads are located in place as a
// DataRef (which piece, which offset) and gathered straight to their
// destination, decoding fp16/bf16 on the way.
//
// Both halves live here (writer beside reader), so the byte layout of each
// message is spelled in one file; wire_test.cc checks that what the writer
// produces is read back by ParsePushRequest / ParsePullResponse and by the
// generated protobuf parser.
//
// Writing a push (the worker's client):
//   std::string head;
//   wire::AppendPushHead({.worker_id = w, .seq = s, .part = 0,
//                         .num_parts = 1}, &head);
//   wire::AppendChunkHeader(wire::kPushGradientsField, id, base_version, enc,
//                           bytes, &head);
//   // send: head, <bytes payload bytes>, next chunk header, ...
//
// Writing a pull response (the server):
//   std::string h = wire::ChunkHeader(wire::kPullChunksField, id, version,
//                                     enc, bytes);
//   // send: h, <bytes payload bytes>, next chunk header, ...
//
// Reading one:
//   wire::Pieces pieces = ...;              // views of the received slices
//   DP_ASSIGN_OR_RETURN(wire::PushMessage m, wire::ParsePushRequest(pieces));
//   for (const wire::WireChunk& c : m.chunks)
//     DP_RETURN_IF_ERROR(wire::DecodeInto(pieces, c, dst, n, &scratch));
#ifndef DOWNPOUR_RPC_WIRE_H_
#define DOWNPOUR_RPC_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace downpour {
namespace wire {

// proto Encoding.
enum class Encoding : int32_t { kRawF32 = 0, kFp16 = 1, kBf16 = 2 };

// "f32" (also "none"), "fp16", "bf16".
absl::StatusOr<Encoding> ParseEncoding(absl::string_view name);
const char* EncodingName(Encoding e);
// Bytes per value: 4 or 2.
int BytesPerValue(Encoding e);

using Pieces = std::vector<absl::string_view>;

// Where a payload lies in a message: `size` bytes from byte `offset` of
// piece `piece` on, possibly running over into the following pieces.
struct DataRef {
  size_t piece = 0;
  size_t offset = 0;
  int64_t size = 0;
};

// A ChunkValues or ChunkGradient (same field numbers: chunk_id 1, version or
// base_version 2, data 3, encoding 4).
struct WireChunk {
  int32_t chunk_id = 0;
  int64_t version = 0;
  Encoding encoding = Encoding::kRawF32;
  DataRef data;
};

// Where a request's payloads are, when they travel through a worker's
// shared memory (rpc/shared_memory.h; proto SharedMemory, same fields).
struct SharedRef {
  uint32_t pid = 0;
  int32_t fd = 0;
  uint64_t key = 0;
  uint64_t size = 0;
  uint64_t push_offset = 0;
  uint64_t reply_offset = 0;
};

struct PushMessage {
  int32_t worker_id = 0;
  int64_t seq = 0;
  bool leave = false;
  int32_t part = 0;
  int32_t num_parts = 0;
  // Raw value of pull_encoding (PushPull); the caller validates it.
  int64_t pull_encoding = 0;
  // PushRequest.incarnation (field 8).
  uint64_t incarnation = 0;
  // PushRequest.pull_min_version (field 9); the caller validates it.
  int64_t pull_min_version = 0;
  // PushRequest.shared (field 10): the chunks' payloads are in that region
  // (their data fields are empty).
  std::optional<SharedRef> shared;
  std::vector<WireChunk> chunks;
};

// ---- Writing ----------------------------------------------------------------
// Field numbers of the repeated chunk submessages: PushRequest.gradients
// (ChunkGradient) and PullResponse.chunks (ChunkValues).
inline constexpr int kPushGradientsField = 3;
inline constexpr int kPullChunksField = 1;

void PutVarint(uint64_t v, std::string* out);
// Tag and value of a varint field (written even when zero).
void PutVarintField(int field, uint64_t v, std::string* out);

// The PushRequest fields before its gradients: worker_id (1), seq (2),
// part (5), num_parts (6), each written even when zero, and pull_encoding
// (7) only when set (a PushPull), incarnation (8) and pull_min_version (9)
// when nonzero, and shared (10) when set. A leave
// (field 4) is not a bulk message: it goes out as a generated
// proto::PushRequest.
struct PushHead {
  int32_t worker_id = 0;
  int64_t seq = 0;
  int32_t part = 0;
  int32_t num_parts = 0;
  std::optional<Encoding> pull_encoding;
  uint64_t incarnation = 0;
  int64_t pull_min_version = 0;
  std::optional<SharedRef> shared;
};
void AppendPushHead(const PushHead& head, std::string* out);

// PullResponse.server_incarnation (field 10), the bytes a pull
// response may start with (empty for 0), and values_in_shared_memory (11)
// when set.
inline constexpr int kPullServerIncarnationField = 10;
inline constexpr int kPullValuesSharedField = 11;
inline constexpr int kPushSharedField = 10;
std::string PullResponseHead(uint64_t server_incarnation,
                             bool values_shared = false);

// Everything of one chunk submessage (field `outer_field` of the enclosing
// message: kPushGradientsField or kPullChunksField) up to its payload, which
// must follow with exactly `data_bytes` bytes. Both chunk messages number
// their fields alike: chunk_id 1, version / base_version 2, data 3,
// encoding 4 (written only when not RAW_F32).
void AppendChunkHeader(int outer_field, int32_t chunk_id, int64_t version,
                       Encoding encoding, int64_t data_bytes, std::string* out);
// The same as a new string.
std::string ChunkHeader(int outer_field, int32_t chunk_id, int64_t version,
                        Encoding encoding, int64_t data_bytes);

// ---- Reading ----------------------------------------------------------------
// InvalidArgument describing the first problem for a malformed message, an
// unknown encoding or a chunk field out of range.
absl::StatusOr<PushMessage> ParsePushRequest(const Pieces& pieces);
// `server_incarnation`, when not null, gets PullResponse.server_incarnation
// (0 when absent; the last one when repeated, as protobuf reads it), and
// `values_shared` its values_in_shared_memory.
absl::StatusOr<std::vector<WireChunk>> ParsePullResponse(
    const Pieces& pieces, uint64_t* server_incarnation = nullptr,
    bool* values_shared = nullptr);

// How a copy writes its destination. kStreaming uses non-temporal stores,
// which skip reading each destination cache line before overwriting it and
// leave the cache to data still in use: the right choice for a destination
// far larger than the last-level cache (a big pull). Same bytes either way.
enum class Store { kCached, kStreaming };

// kStreaming for a destination of at least `streaming_min_bytes`, else
// kCached: the one rule the client's pulls (and the benchmark timing them)
// follow.
inline Store StoreFor(int64_t destination_bytes, int64_t streaming_min_bytes) {
  return destination_bytes >= streaming_min_bytes ? Store::kStreaming
                                                  : Store::kCached;
}

// memcpy, or with non-temporal stores for Store::kStreaming (plain memcpy on
// targets without them). Any alignment, any n.
void CopyBytes(char* dst, const char* src, size_t n, Store store);

// Copies the payload bytes of `ref` to `dst` (ref.size bytes).
void Gather(const Pieces& pieces, const DataRef& ref, char* dst,
            Store store = Store::kCached);

// The payload of each of `chunks` as byte ranges of `pieces`, without
// copying: result[i] lists chunk i's non-empty ranges, in order. The views
// are kept in *storage (cleared and refilled here), which must outlive the
// result and not change while it is used.
std::vector<absl::Span<const absl::string_view>> PayloadRanges(
    const Pieces& pieces, absl::Span<const WireChunk> chunks,
    std::vector<absl::string_view>* storage);

// Decodes chunk `c`'s payload into `n` floats at `dst`: a gather for
// RAW_F32, a gather-and-convert for FP16/BF16 (`scratch` holds the encoded
// bytes of a payload that spans pieces). InvalidArgument when the payload is
// not exactly n values of its encoding. `store` applies to RAW_F32.
absl::Status DecodeInto(const Pieces& pieces, const WireChunk& c, float* dst,
                        int64_t n, std::string* scratch,
                        Store store = Store::kCached);

// Encodes n floats into `dst` (n * BytesPerValue(e) bytes).
void EncodeValues(Encoding e, const float* src, int64_t n, char* dst);

}  // namespace wire
}  // namespace downpour

#endif  // DOWNPOUR_RPC_WIRE_H_
