// File: rpc/grpc_config.h
//
// gRPC settings the parameter servers and their clients must agree on: the
// message size limit, the names of the bulk methods (called through a
// generic stub, served as raw byte buffers) and the builder / channel
// configuration that applies them. Both sides include this file; neither
// includes the other's headers.
//
//   grpc::ServerBuilder b;
//   ConfigureServerBuilder(&b);
//   grpc::ChannelArguments args;
//   ConfigureChannelArguments(&args);
//
// Thread-safety: stateless functions and constants.
#ifndef DOWNPOUR_RPC_GRPC_CONFIG_H_
#define DOWNPOUR_RPC_GRPC_CONFIG_H_

#include <cstdint>
#include <string>

#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"

namespace downpour {

// Largest request or response the server and clients accept (bytes), set
// explicitly on both sides. Clients cut transfers into parts of a few MiB
// (GrpcClientOptions::part_bytes), far below it; a larger message is refused
// by gRPC with RESOURCE_EXHAUSTED and the server goes on.
inline constexpr int kMaxMessageBytes = 64 << 20;

// Full names of the bulk methods of proto/parameter_server.proto.
inline constexpr char kPullMethod[] = "/downpour.proto.ParameterServer/Pull";
inline constexpr char kPushMethod[] = "/downpour.proto.ParameterServer/Push";
inline constexpr char kPushPullMethod[] =
    "/downpour.proto.ParameterServer/PushPull";

// The bytes of a bulk method's raw byte buffer in one string, in *out
// (cleared first); false, with *out empty, when gRPC cannot read its
// slices.
bool ByteBufferBytes(const grpc::ByteBuffer& b, std::string* out);

// Sets the message limits above on a server being built / on a client
// channel. A server also turns SO_REUSEPORT off, so that a second server on
// a port in use fails to start ("could not listen on ...") instead of
// sharing the port's connections, and accepts only uncompressed requests
// (a compressed one is UNIMPLEMENTED, never inflated). (Larger HTTP/2 frames and TCP read chunks were measured with
// tests/bench:transport_bench and were slower than gRPC's defaults here.)
void ConfigureServerBuilder(grpc::ServerBuilder* builder);

// What many clients sending large messages at once
// may make a server hold. The defaults are every server's (ps_server's
// --grpc_memory_quota_mb and --max_streams_per_connection); 0 leaves gRPC's
// default (no limit).
//
// What bounds memory in Debian's gRPC 1.51 (measured with
// tests/bench/load_memory.sh, 64 clients each pushing 60 MiB messages back
// to back): a unary call's whole request is read before any handler runs,
// so neither a check in the service nor a thread limit can hold back the
// bytes; the ResourceQuota does. Past it, gRPC's reclaimers reset streams
// (the client sees RESOURCE_EXHAUSTED, "RST_STREAM with error code 11") and
// close connections (UNAVAILABLE, "GOAWAY received"), which clients retry
// after a backoff. The server's peak resident memory then stays near
// quota + the store (values and optimizer state) + ~60 MiB: 1193 MiB with
// 1 GiB (60 MiB model, adagrad), 431 MiB with 256 MiB, against 3.4-3.6 GiB
// without a quota. A training job's calls are parts of a few MiB, one in
// flight per connection, far below it.
inline constexpr int64_t kDefaultMemoryQuotaBytes = int64_t{1} << 30;
inline constexpr int kDefaultMaxConcurrentStreams = 16;
struct ServerLimits {
  // A grpc::ResourceQuota over the server's transport buffers.
  int64_t memory_quota_bytes = kDefaultMemoryQuotaBytes;
  // Concurrent calls (HTTP/2 streams) per client connection; more wait.
  int max_concurrent_streams = kDefaultMaxConcurrentStreams;
};
void ConfigureServerLimits(const ServerLimits& limits,
                           grpc::ServerBuilder* builder);
void ConfigureChannelArguments(grpc::ChannelArguments* args);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_GRPC_CONFIG_H_
