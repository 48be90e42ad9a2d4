// File: rpc/server_auth.h
//
// The bearer-token check where gRPC sees a call's headers, before it reads
// the call's body. In gRPC 1.51 a unary call's whole request (inflated, if
// compressed) is received before any handler or interceptor runs, so a
// check in the handler lets anyone without the token make the server
// receive and decompress up to the message limit per call. The credentials
// made here run TokenAuthenticator::CheckHeader in gRPC's auth-metadata
// step instead: a refused call is answered UNAUTHENTICATED from its headers
// and its body is never read.
//
//   DP_ASSIGN_OR_RETURN(auto creds, BuildServerCredentials(security));
//   creds = WithTokenCheck(std::move(creds), security, authenticator);
//   builder.AddListeningPort(address, creds);
//
// Health checks (`/grpc.health.v1.Health/`) pass without a token: probes
// carry none.
//
// Thread-safety: the check runs on gRPC's threads; the authenticator is
// shared and must be thread-safe (it is).
#ifndef DOWNPOUR_RPC_SERVER_AUTH_H_
#define DOWNPOUR_RPC_SERVER_AUTH_H_

#include <memory>

#include "grpcpp/security/server_credentials.h"
#include "rpc/auth_token.h"
#include "rpc/credentials.h"

namespace downpour {

// `credentials` (made by BuildServerCredentials(security)) with the token
// check of `auth` added; `credentials` itself when `auth` is null (no token).
std::shared_ptr<grpc::ServerCredentials> WithTokenCheck(
    std::shared_ptr<grpc::ServerCredentials> credentials,
    const TransportSecurityOptions& security,
    std::shared_ptr<const TokenAuthenticator> auth);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_SERVER_AUTH_H_
