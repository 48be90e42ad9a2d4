#include "rpc/server_auth.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace downpour {
namespace {

constexpr absl::string_view kHealthPrefix = "/grpc.health.v1.Health/";

// OK, or the refusal, for a call with this path and authorization header
// (empty when absent).
absl::Status CheckCall(const TokenAuthenticator& auth, absl::string_view path,
                       absl::string_view authorization) {
  if (absl::StartsWith(path, kHealthPrefix)) return absl::OkStatus();
  return auth.CheckHeader(std::string(authorization));
}

absl::string_view View(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
                           GRPC_SLICE_LENGTH(s));
}

// The check for TLS credentials (grpc::SecureServerCredentials takes a C++
// processor). Not blocking: gRPC calls it inline on its own thread.
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::shared_ptr<const TokenAuthenticator> auth)
      : auth_(std::move(auth)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& md, grpc::AuthContext*,
                       OutputMetadata*, OutputMetadata*) override {
    absl::string_view path, authorization;
    for (const auto& [key, value] : md) {
      const absl::string_view k(key.data(), key.size());
      if (k == ":path") path = absl::string_view(value.data(), value.size());
      if (k == "authorization") {
        authorization = absl::string_view(value.data(), value.size());
      }
    }
    const absl::Status s = CheckCall(*auth_, path, authorization);
    if (s.ok()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        std::string(s.message()));
  }

 private:
  const std::shared_ptr<const TokenAuthenticator> auth_;
};

// Plaintext listening ports with the check. grpc::InsecureServerCredentials
// takes no processor, so the port is added through the core API, whose
// insecure credentials do.
class InsecureTokenCredentials final : public grpc::ServerCredentials {
 public:
  explicit InsecureTokenCredentials(std::shared_ptr<const TokenAuthenticator> auth)
      : auth_(std::move(auth)) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    grpc_auth_metadata_processor processor;
    processor.process = &Process;
    processor.destroy = [](void* state) {
      delete static_cast<std::shared_ptr<const TokenAuthenticator>*>(state);
    };
    processor.state = new std::shared_ptr<const TokenAuthenticator>(auth_);
    grpc_server_credentials_set_auth_metadata_processor(creds, processor);
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  static void Process(void* state, grpc_auth_context*, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb cb,
                      void* user_data) {
    const auto& auth = *static_cast<std::shared_ptr<const TokenAuthenticator>*>(state);
    absl::string_view path, authorization;
    for (size_t i = 0; i < num_md; ++i) {
      const absl::string_view k = View(md[i].key);
      if (k == ":path") path = View(md[i].value);
      if (k == "authorization") authorization = View(md[i].value);
    }
    const absl::Status s = CheckCall(*auth, path, authorization);
    const std::string message(s.message());
    cb(user_data, nullptr, 0, nullptr, 0,
       s.ok() ? GRPC_STATUS_OK : GRPC_STATUS_UNAUTHENTICATED,
       s.ok() ? nullptr : message.c_str());
  }

  const std::shared_ptr<const TokenAuthenticator> auth_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> WithTokenCheck(
    std::shared_ptr<grpc::ServerCredentials> credentials,
    const TransportSecurityOptions& security,
    std::shared_ptr<const TokenAuthenticator> auth) {
  if (auth == nullptr) return credentials;
  if (security.mode == TransportSecurityOptions::Mode::kInsecure) {
    return std::make_shared<InsecureTokenCredentials>(std::move(auth));
  }
  credentials->SetAuthMetadataProcessor(
      std::make_shared<TokenProcessor>(std::move(auth)));
  return credentials;
}

}  // namespace downpour
