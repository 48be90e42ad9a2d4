// File: rpc/credentials.h
//
// The one place that turns transport-security options into gRPC server and
// channel credentials. Every server (ps_server, the in-process hosts of the
// tests and benchmarks) and every client channel gets its credentials here,
// so adding TLS or a bearer token changes this file and the options struct,
// not the call sites.
//
//   TransportSecurityOptions security;          // insecure today
//   DP_ASSIGN_OR_RETURN(auto server_creds, BuildServerCredentials(security));
//   builder.AddListeningPort(address, server_creds, &port);
//   DP_ASSIGN_OR_RETURN(auto channel_creds, BuildChannelCredentials(security));
//   auto channel = grpc::CreateCustomChannel(target, channel_creds, args);
//
// Thread-safety: stateless functions. The returned credentials are shared
// (gRPC reference-counts them) and may be used from any thread.
#ifndef DOWNPOUR_RPC_CREDENTIALS_H_
#define DOWNPOUR_RPC_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace downpour {

// How the servers and workers of a job protect their connections. Both
// sides of a job must be given the same options.
struct TransportSecurityOptions {
  enum class Mode {
    // Plain TCP, no authentication: for loopback and trusted networks only.
    kInsecure,
  };
  Mode mode = Mode::kInsecure;
  // Planned (issue "Security and operations"): a kTls mode with the paths
  // of a CA bundle, this process's certificate and key, and the path of a
  // file holding a bearer token checked by the server. New fields keep
  // kInsecure's defaults so that existing callers are unchanged.
};

// Credentials for grpc::ServerBuilder::AddListeningPort. InvalidArgument
// for options that cannot be honoured (e.g. an unknown mode).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const TransportSecurityOptions& options);

// Credentials for grpc::CreateCustomChannel / grpc::CreateChannel.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
BuildChannelCredentials(const TransportSecurityOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_CREDENTIALS_H_
