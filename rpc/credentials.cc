#include "rpc/credentials.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace downpour {
namespace {

absl::Status UnknownMode(const TransportSecurityOptions& options) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport security mode ",
                   static_cast<int>(options.mode)));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": cannot open (missing or unreadable)"));
  }
  std::ostringstream s;
  s << f.rdbuf();
  if (!f.good() && !f.eof()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": read error"));
  }
  return s.str();
}

// A PEM file's text, checked to parse as a certificate (or key).
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what,
                                    bool is_key) {
  DP_ASSIGN_OR_RETURN(std::string pem, ReadWholeFile(path, what));
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  bool ok = false;
  if (is_key) {
    EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    ok = k != nullptr;
    EVP_PKEY_free(k);
  } else {
    X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    ok = x != nullptr;
    X509_free(x);
  }
  BIO_free(bio);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", path, ": not a PEM ", is_key ? "private key" : "certificate"));
  }
  return pem;
}

// InvalidArgument naming both files when the key is not the certificate's.
absl::Status CheckKeyMatches(const std::string& cert_pem, const std::string& key_pem,
                             const TransportSecurityOptions& o) {
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  X509* x = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  const bool match = x != nullptr && k != nullptr && X509_check_private_key(x, k) == 1;
  X509_free(x);
  EVP_PKEY_free(k);
  BIO_free(cb);
  BIO_free(kb);
  if (match) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--tls_key ", o.tls_key_file, " does not match --tls_cert ",
                   o.tls_cert_file));
}

struct PemFiles {
  std::string cert, key, ca;  // Empty when not given.
};

absl::StatusOr<PemFiles> LoadPems(const TransportSecurityOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key must be given together");
  }
  PemFiles p;
  if (!o.tls_cert_file.empty()) {
    DP_ASSIGN_OR_RETURN(p.cert, ReadPem(o.tls_cert_file, "--tls_cert", false));
    DP_ASSIGN_OR_RETURN(p.key, ReadPem(o.tls_key_file, "--tls_key", true));
    DP_RETURN_IF_ERROR(CheckKeyMatches(p.cert, p.key, o));
  }
  if (!o.tls_ca_file.empty()) {
    DP_ASSIGN_OR_RETURN(p.ca, ReadPem(o.tls_ca_file, "--tls_ca", false));
  }
  return p;
}

// Adds `authorization: Bearer <token>` to every call's initial metadata.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // Owned by the factory.
};

class BearerTokenFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);  // gRPC owns interceptors.
  }

 private:
  const std::string header_;
};

std::string HostOf(const std::string& host_port) {
  std::string h = host_port;
  if (absl::StartsWith(h, "[")) {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  const size_t colon = h.rfind(':');
  // More than one ':' without brackets: a bare IPv6 address.
  if (colon != std::string::npos && h.find(':') == colon) h = h.substr(0, colon);
  return h;
}

}  // namespace

absl::StatusOr<TransportSecurityOptions> MakeSecurityOptions(
    const std::string& tls_cert, const std::string& tls_key,
    const std::string& tls_ca, const std::string& auth_token_file,
    bool allow_insecure) {
  TransportSecurityOptions o;
  o.tls_cert_file = tls_cert;
  o.tls_key_file = tls_key;
  o.tls_ca_file = tls_ca;
  o.auth_token_file = auth_token_file;
  o.allow_insecure = allow_insecure;
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key must be given together");
  }
  if (!tls_cert.empty() || !tls_ca.empty()) o.mode = TransportSecurityOptions::Mode::kTls;
  return o;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          bool allow_readable) {
  DP_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "--auth_token_file"));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 007) != 0) {
    const std::string mode = absl::StrFormat("%04o", st.st_mode & 07777);
    if (!allow_readable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file ", path, " has mode ", mode,
          ": users outside its group may read it; chmod 600 it (or pass "
          "--allow_readable_token_file)"));
    }
    std::fprintf(stderr,
                 "WARNING: --auth_token_file %s has mode %s: other users may "
                 "read the job's token (--allow_readable_token_file)\n",
                 path.c_str(), mode.c_str());
  }
  const size_t nl = text.find('\n');
  std::string token(absl::StripAsciiWhitespace(text.substr(0, nl)));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file ", path, ": empty token"));
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const TransportSecurityOptions& options) {
  switch (options.mode) {
    case TransportSecurityOptions::Mode::kInsecure:
      return grpc::InsecureServerCredentials();
    case TransportSecurityOptions::Mode::kTls: {
      if (options.tls_cert_file.empty()) {
        return absl::InvalidArgumentError(
            "a TLS server needs --tls_cert and --tls_key");
      }
      DP_ASSIGN_OR_RETURN(PemFiles pem, LoadPems(options));
      grpc::SslServerCredentialsOptions ssl(
          pem.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      ssl.pem_root_certs = pem.ca;
      ssl.pem_key_cert_pairs.push_back({pem.key, pem.cert});
      return grpc::SslServerCredentials(ssl);
    }
  }
  return UnknownMode(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
BuildChannelCredentials(const TransportSecurityOptions& options) {
  switch (options.mode) {
    case TransportSecurityOptions::Mode::kInsecure:
      return grpc::InsecureChannelCredentials();
    case TransportSecurityOptions::Mode::kTls: {
      DP_ASSIGN_OR_RETURN(PemFiles pem, LoadPems(options));
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = pem.ca;
      ssl.pem_private_key = pem.key;
      ssl.pem_cert_chain = pem.cert;
      return grpc::SslCredentials(ssl);
    }
  }
  return UnknownMode(options);
}

absl::StatusOr<ClientSecurity> BuildClientSecurity(
    const TransportSecurityOptions& options) {
  ClientSecurity c;
  DP_ASSIGN_OR_RETURN(c.credentials, BuildChannelCredentials(options));
  if (!options.auth_token_file.empty()) {
    DP_ASSIGN_OR_RETURN(c.bearer_token,
                        ReadTokenFile(options.auth_token_file,
                                      options.allow_readable_token_file));
  }
  c.tls = options.mode == TransportSecurityOptions::Mode::kTls;
  c.allow_insecure = options.allow_insecure;
  return c;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target, const ClientSecurity& security,
    const grpc::ChannelArguments& args) {
  DP_RETURN_IF_ERROR(
      CheckTargetIsSafe(target, security.tls, security.allow_insecure));
  if (security.bearer_token.empty()) {
    return grpc::CreateCustomChannel(target, security.credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<BearerTokenFactory>(security.bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, security.credentials, args, std::move(interceptors));
}

namespace {

// Whether a socket address is in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104.
bool IsLoopbackSockaddr(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const in6_addr& in6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&in6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6) && in6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

bool IsLoopbackAddress(const std::string& host_port) {
  std::string target = absl::AsciiStrToLower(host_port);
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::StartsWith(target, scheme)) {
      target = target.substr(scheme.size());
      break;
    }
  }
  const std::string host = HostOf(target);
  if (host.empty()) return false;
  // What the name resolves to, not how it reads: "localhost" or any other
  // name counts only when every address it has is loopback.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool all_loopback = found != nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    all_loopback &= IsLoopbackSockaddr(a->ai_addr);
  }
  ::freeaddrinfo(found);
  return all_loopback;
}

absl::Status CheckListenAddressIsSafe(const std::string& address,
                                      const TransportSecurityOptions& options) {
  const bool tls = options.mode == TransportSecurityOptions::Mode::kTls;
  const bool checks_clients =
      !options.tls_ca_file.empty() || !options.auth_token_file.empty();
  // (Resolving the address is left for last: it may ask DNS.)
  if (options.allow_insecure || (tls && checks_clients) ||
      IsLoopbackAddress(address)) {
    return absl::OkStatus();
  }
  if (tls) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", address,
        " with TLS but no client check: without --tls_ca (client "
        "certificates) or --auth_token_file anyone who can reach this port "
        "could read and overwrite the model. Give --tls_ca and "
        "--auth_token_file (deploy/make_certs.sh makes them), or bind "
        "127.0.0.1, or accept the risk on a trusted network with "
        "--allow_insecure"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to serve ", address,
      " without TLS: anyone who can reach this port could read and overwrite "
      "the model. Give --tls_cert, --tls_key and --tls_ca (deploy/make_certs.sh "
      "makes them) and --auth_token_file, or bind 127.0.0.1, or accept the "
      "risk on a trusted network with --allow_insecure"));
}

absl::Status CheckTargetIsSafe(const std::string& target, bool tls,
                               bool allow_insecure) {
  if (tls || allow_insecure || IsLoopbackAddress(target)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to connect to ", target,
      " in plaintext: gradients and parameters would cross the network "
      "unprotected. Give --tls_ca (and --tls_cert/--tls_key for mutual TLS), "
      "or --allow_insecure on a trusted network"));
}

}  // namespace downpour
