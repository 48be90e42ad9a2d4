// File: rpc/auth_token.h
//
// The server side of the bearer token (rpc/credentials.h sends it): checks
// the `authorization: Bearer <token>` metadata of a call in constant time
// and counts the refusals. The parameter-server service calls Check first in
// every handler, so a refused call reads and changes nothing.
//
//   DP_ASSIGN_OR_RETURN(auto auth, TokenAuthenticator::Create(security));
//   if (absl::Status s = auth->Check(*ctx); !s.ok()) return Finish(ctx, s);
//
// A null authenticator (no --auth_token_file) accepts every call.
// Thread-safety: Check and refusals may be called from any thread.
#ifndef DOWNPOUR_RPC_AUTH_TOKEN_H_
#define DOWNPOUR_RPC_AUTH_TOKEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "rpc/credentials.h"

namespace downpour {

class TokenAuthenticator {
 public:
  // Why a call was refused (a metrics label).
  enum class Refusal { kMissing, kWrong };

  // Null when options name no token file; InvalidArgument naming the file
  // when it cannot be read or is empty.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> Create(
      const TransportSecurityOptions& options);
  // For tests: a given token.
  explicit TokenAuthenticator(const std::string& token);

  // OK when the call carries the token; UNAUTHENTICATED otherwise (counted).
  absl::Status Check(const grpc::ServerContextBase& ctx) const;
  // The same for a raw header value (empty: none sent).
  absl::Status CheckHeader(const std::string& authorization) const;

  int64_t refused_missing() const { return refused_missing_.load(); }
  int64_t refused_wrong() const { return refused_wrong_.load(); }
  // Called on every refusal (metrics); set once before serving.
  void set_on_refusal(std::function<void(Refusal)> f) { on_refusal_ = std::move(f); }

 private:
  unsigned char digest_[32];  // SHA-256 of the token.
  mutable std::atomic<int64_t> refused_missing_{0};
  mutable std::atomic<int64_t> refused_wrong_{0};
  std::function<void(Refusal)> on_refusal_;
};

// For a callback-API unary handler, first thing: true, with `reactor`
// finished UNAUTHENTICATED, when `auth` (null: no token) refuses the call.
//   if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
bool RefuseUnauthenticated(const TokenAuthenticator* auth,
                           const grpc::ServerContextBase& context,
                           grpc::ServerUnaryReactor* reactor);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_AUTH_TOKEN_H_
