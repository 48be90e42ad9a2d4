// File: server/grpc_service.h
//
// The gRPC face of one parameter-server shard: a thin adapter that turns
// requests into ParameterStore calls and Status into grpc::Status, nothing
// more. Only a factory is exposed.
//
//   auto service = NewParameterServerService(store.get());
//   grpc::ServerBuilder b;
//   b.RegisterService(service.get());
#ifndef DOWNPOUR_SERVER_GRPC_SERVICE_H_
#define DOWNPOUR_SERVER_GRPC_SERVICE_H_

#include <memory>

#include "grpcpp/impl/codegen/service_type.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/parameter_store.h"

namespace downpour {

struct ServiceOptions {
  // Testing only: every Nth reply to a Pull, Push or PushPull is replaced,
  // after the request took effect, by UNAVAILABLE, as if it had been lost
  // on the network (clients retry; a retried push is not applied twice).
  // 0: never.
  int debug_drop_reply_every = 0;
};

// `store` must outlive the service. Handlers run on gRPC's callback threads;
// each does one bounded pass over the request's chunks.
std::unique_ptr<grpc::Service> NewParameterServerService(
    ParameterStore* store, const ServiceOptions& options = ServiceOptions());

// Largest request or response the server and clients accept (bytes), set
// explicitly on both sides. Clients cut transfers into parts of a few MiB
// (GrpcClientOptions::part_bytes), far below it; a larger message is refused
// by gRPC with RESOURCE_EXHAUSTED and the server goes on.
inline constexpr int kMaxMessageBytes = 64 << 20;

// Sets the message limits above on a server being built / on a client
// channel. (Larger HTTP/2 frames and TCP read chunks were measured with
// tests/bench:transport_bench and were slower than gRPC's defaults here.)
void ConfigureServerBuilder(grpc::ServerBuilder* builder);
void ConfigureChannelArguments(grpc::ChannelArguments* args);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_GRPC_SERVICE_H_
