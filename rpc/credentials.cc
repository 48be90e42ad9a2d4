#include "rpc/credentials.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace downpour {
namespace {

absl::Status UnknownMode(const TransportSecurityOptions& options) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport security mode ",
                   static_cast<int>(options.mode)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const TransportSecurityOptions& options) {
  switch (options.mode) {
    case TransportSecurityOptions::Mode::kInsecure:
      return grpc::InsecureServerCredentials();
  }
  return UnknownMode(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
BuildChannelCredentials(const TransportSecurityOptions& options) {
  switch (options.mode) {
    case TransportSecurityOptions::Mode::kInsecure:
      return grpc::InsecureChannelCredentials();
  }
  return UnknownMode(options);
}

}  // namespace downpour
