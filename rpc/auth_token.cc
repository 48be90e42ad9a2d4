#include "rpc/auth_token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <string>

#include "absl/strings/match.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

constexpr char kBearer[] = "Bearer ";

void Sha256(const std::string& s, unsigned char out[32]) {
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::Create(
    const TransportSecurityOptions& options) {
  if (options.auth_token_file.empty()) return std::unique_ptr<TokenAuthenticator>();
  DP_ASSIGN_OR_RETURN(std::string token,
                      ReadTokenFile(options.auth_token_file,
                                    options.allow_readable_token_file));
  return std::make_unique<TokenAuthenticator>(token);
}

TokenAuthenticator::TokenAuthenticator(const std::string& token) {
  Sha256(token, digest_);
}

absl::Status TokenAuthenticator::Check(const grpc::ServerContextBase& ctx) const {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  return CheckHeader(it == md.end() ? std::string()
                                    : std::string(it->second.data(), it->second.size()));
}

absl::Status TokenAuthenticator::CheckHeader(const std::string& authorization) const {
  if (!absl::StartsWith(authorization, kBearer)) {
    refused_missing_.fetch_add(1);
    if (on_refusal_) on_refusal_(Refusal::kMissing);
    return absl::UnauthenticatedError(
        "no bearer token: this server requires --auth_token_file");
  }
  // Comparing digests in constant time hides both the token and its length.
  unsigned char got[32];
  Sha256(authorization.substr(sizeof(kBearer) - 1), got);
  if (CRYPTO_memcmp(got, digest_, sizeof(got)) != 0) {
    refused_wrong_.fetch_add(1);
    if (on_refusal_) on_refusal_(Refusal::kWrong);
    return absl::UnauthenticatedError(
        "bearer token refused: --auth_token_file does not hold this job's token");
  }
  return absl::OkStatus();
}

bool RefuseUnauthenticated(const TokenAuthenticator* auth,
                           const grpc::ServerContextBase& context,
                           grpc::ServerUnaryReactor* reactor) {
  if (auth == nullptr) return false;
  const absl::Status s = auth->Check(context);
  if (s.ok()) return false;
  reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                               std::string(s.message())));
  return true;
}

}  // namespace downpour
