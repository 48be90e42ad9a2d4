// File: worker/part_messages.h
//
// The messages of the gRPC parameter client, one per part (worker/
// part_plan.h): Declare, Pull and Push/PushPull requests, and reading the
// replies. Bulk payloads are never copied into protobuf strings: a push
// request's slices point at the caller's float32 gradients (or at this
// encoder's fp16/bf16 copy), and a pull reply is read from its received
// slices straight into the caller's flat vector (rpc/wire.h).
//
//   PushEncoder encoder;  // Reused across pushes (its buffers).
//   std::vector<grpc::ByteBuffer> req = encoder.Encode(
//       map, parts, head, wire::Encoding::kFp16, grads, base_versions);
//   ...send req[i] for part i; while the calls run, `grads` and `encoder`
//   must stay as they are...
//
// Thread-safety: the functions may run on any thread; ReadPulledPart on
// several at once for different parts. A PushEncoder is used by one thread
// at a time.
#ifndef DOWNPOUR_WORKER_PART_MESSAGES_H_
#define DOWNPOUR_WORKER_PART_MESSAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/sharding.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/parameter_server.pb.h"
#include "rpc/shared_memory.h"
#include "rpc/wire.h"
#include "worker/part_plan.h"
#include "worker/ps_client.h"

namespace downpour {

// The worker's shared-memory region (rpc/shared_memory.h) and the shards
// whose float32 payloads go through it instead of the wire (the shards on
// this host that accepted it). Default: none, every payload on the wire.
struct SharedRoute {
  const SharedRegion* region = nullptr;  // Not owned.
  std::vector<bool> shards;
  bool For(int shard) const {
    return region != nullptr && shard >= 0 &&
           shard < static_cast<int>(shards.size()) && shards[shard];
  }
};

// ResourceExhausted when the layout has a chunk that does not fit one
// message with the layout proto (which travels in every Declare part).
absl::Status CheckChunksFitMessages(const ModelLayout& layout,
                                    const proto::ModelLayout& layout_proto,
                                    const ShardMap& map);

// One DeclareModelRequest per part: the layout and the part's initial
// values (`initial` is the whole flat model, float32).
std::vector<proto::DeclareModelRequest> DeclareRequests(
    const proto::ModelLayout& layout_proto, const ShardMap& map,
    absl::Span<const Part> parts, int32_t worker_id,
    absl::Span<const float> initial);

// One serialized PullRequest per part; those to a shard of `shared` name
// its region (encoding must then be float32).
std::vector<grpc::ByteBuffer> PullRequests(absl::Span<const Part> parts,
                                           int32_t worker_id,
                                           const PullOptions& options,
                                           wire::Encoding encoding,
                                           const SharedRoute& shared = {});

// Writes the PushRequests of one push (or PushPull) with the bytes of its
// chunk headers and encoded payloads kept in buffers reused across pushes.
class PushEncoder {
 public:
  // One request per part: `head` with part and num_parts set from the part
  // (head.pull_encoding set: PushPull requests), then each chunk's header
  // and its gradient (grads, the whole flat vector) in `encoding`, computed
  // from base_versions[chunk id]. The requests point into `grads` (float32)
  // and into this encoder: both must stay unchanged while the requests are
  // in use, and the next Encode overwrites the encoder's part. A part to a
  // shard of `shared` copies its float32 gradients into the region's push
  // area instead and names the region (encoding must then be float32).
  std::vector<grpc::ByteBuffer> Encode(const ShardMap& map,
                                       absl::Span<const Part> parts,
                                       wire::PushHead head,
                                       wire::Encoding encoding,
                                       absl::Span<const float> grads,
                                       absl::Span<const int64_t> base_versions,
                                       const SharedRoute& shared = {});

 private:
  // Per part: every header byte, and the encoded payloads (fp16/bf16).
  std::vector<std::string> heads_;
  std::vector<std::string> payloads_;
};

// Reads a PullResponse to `part` into params (the whole flat vector) and
// versions (indexed by chunk id), writing with `store`; *incarnation gets
// the reply's server incarnation. Values the server wrote to shared memory
// are read from the region's reply area. InternalError naming the shard
// when the reply is malformed, has the wrong number of chunks or a chunk
// that is not the shard's, or says its values are in a region this worker
// did not offer that shard.
absl::Status ReadPulledPart(const ShardMap& map, const Part& part,
                            const grpc::ByteBuffer& resp,
                            absl::Span<float> params,
                            std::vector<int64_t>* versions, wire::Store store,
                            uint64_t* incarnation,
                            const SharedRoute& shared = {});

// The server incarnation of a PushResponse; false when it cannot be parsed.
bool ReadPushReply(const grpc::ByteBuffer& resp, uint64_t* incarnation);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_PART_MESSAGES_H_
