#include "rpc/grpc_config.h"

#include <string>
#include <vector>

#include "grpc/compression.h"
#include "grpcpp/resource_quota.h"

namespace downpour {

bool ByteBufferBytes(const grpc::ByteBuffer& b, std::string* out) {
  out->clear();
  std::vector<grpc::Slice> slices;
  if (!b.Dump(&slices).ok()) return false;
  for (const grpc::Slice& s : slices) {
    out->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return true;
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC sets SO_REUSEPORT by default, so a second
  // server on a port in use would start and take half the connections.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Only uncompressed requests: a compressed one is refused (UNIMPLEMENTED)
  // instead of inflated, so a small request cannot make the server hold up
  // to the message limit. Clients never compress.
  builder->AddChannelArgument(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
                              1 << GRPC_COMPRESS_NONE);
}

void ConfigureChannelArguments(grpc::ChannelArguments* args) {
  args->SetMaxReceiveMessageSize(kMaxMessageBytes);
  args->SetMaxSendMessageSize(kMaxMessageBytes);
}

void ConfigureServerLimits(const ServerLimits& limits,
                           grpc::ServerBuilder* builder) {
  if (limits.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("downpour_server");
    quota.Resize(static_cast<size_t>(limits.memory_quota_bytes));
    builder->SetResourceQuota(quota);
  }
  if (limits.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                limits.max_concurrent_streams);
  }
}

}  // namespace downpour
