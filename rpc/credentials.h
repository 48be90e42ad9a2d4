// File: rpc/credentials.h
//
// The one place that turns transport-security options into gRPC server and
// channel credentials. Every server (ps_server, the in-process hosts of the
// tests and benchmarks) and every client channel gets its credentials here.
//
// Two independent protections (README "Security"):
//   * mutual TLS: PEM files for this process's certificate and key and the
//     CA that signed the job's certificates. A server with a CA requires and
//     verifies a client certificate from it; a client verifies the server's.
//   * a bearer token read from a file: clients send it on every call as
//     `authorization: Bearer <token>` (a channel interceptor, so it works on
//     plaintext loopback channels too); servers check it (rpc/auth_token.h).
// And one rule: plaintext to or from anything but loopback is refused unless
// `allow_insecure` (CheckListenAddressIsSafe, CheckTargetIsSafe).
//
//   TransportSecurityOptions security;          // plaintext, loopback only
//   DP_ASSIGN_OR_RETURN(auto server_creds, BuildServerCredentials(security));
//   builder.AddListeningPort(address, server_creds, &port);
//   DP_ASSIGN_OR_RETURN(ClientSecurity client, BuildClientSecurity(security));
//   DP_ASSIGN_OR_RETURN(auto channel, CreateChannel(target, client, args));
//
// Thread-safety: stateless functions. The returned credentials are shared
// (gRPC reference-counts them) and may be used from any thread.
#ifndef DOWNPOUR_RPC_CREDENTIALS_H_
#define DOWNPOUR_RPC_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace downpour {

// How the servers and workers of a job protect their connections. Both
// sides of a job must be given the same CA and token.
struct TransportSecurityOptions {
  enum class Mode {
    // Plain TCP: for loopback, or elsewhere only with allow_insecure.
    kInsecure,
    // TLS with the PEM files below (tls_ca makes it mutual).
    kTls,
  };
  Mode mode = Mode::kInsecure;
  // PEM files (kTls). A server needs cert and key; a client sends them when
  // given. With ca, a server requires client certificates signed by it and a
  // client verifies the server against it (else the system's roots).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // A file holding the job's bearer token (empty: no token). Servers refuse
  // calls without it; clients send it on every call.
  std::string auth_token_file;
  // Allow plaintext listening on / connecting to non-loopback addresses.
  bool allow_insecure = false;
  // Accept a token file that others (outside its group) may read or write
  // (with a warning on stderr); otherwise such a file is refused.
  bool allow_readable_token_file = false;
  // Servers, with mutual TLS: calls for worker k only from the client
  // certificate "worker-<k>", never from a job-wide one (rpc/
  // peer_identity.h).
  bool require_task_certificates = false;
};

// Options from the flag values: kTls when any TLS file is given, and
// InvalidArgument naming the flag when a server-side pair is incomplete.
absl::StatusOr<TransportSecurityOptions> MakeSecurityOptions(
    const std::string& tls_cert, const std::string& tls_key,
    const std::string& tls_ca, const std::string& auth_token_file,
    bool allow_insecure);

// Credentials for grpc::ServerBuilder::AddListeningPort. Reads and checks
// the PEM files: InvalidArgument naming the file for a missing, unreadable,
// unparsable or mismatched (key not matching the certificate) one.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const TransportSecurityOptions& options);

// Channel credentials only (no token); prefer BuildClientSecurity.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
BuildChannelCredentials(const TransportSecurityOptions& options);

// Everything a client needs to open channels, files already read.
struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string bearer_token;  // Empty: none sent.
  bool tls = false;
  bool allow_insecure = false;
};
absl::StatusOr<ClientSecurity> BuildClientSecurity(
    const TransportSecurityOptions& options);

// A channel to `target` ("host:port") with the credentials and, when there
// is a token, an interceptor adding it to every call. FailedPrecondition
// from CheckTargetIsSafe for a plaintext channel to a non-loopback host.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target, const ClientSecurity& security,
    const grpc::ChannelArguments& args);

// True when the host of `host_port` (":port" and an ipv4:/ipv6:/dns:
// scheme optional) is or resolves only to loopback addresses (127.0.0.0/8,
// ::1): a literal is parsed, a name such as "localhost" is resolved, so a
// name that /etc/hosts maps elsewhere is not loopback.
bool IsLoopbackAddress(const std::string& host_port);

// FailedPrecondition, naming the risk and the flags that fix it, when a
// server would listen on `address` ("host:port") that is not loopback,
// allow_insecure is off, and it would be in plaintext or TLS that checks
// no client (no tls_ca for client certificates and no token). Every server start calls it (the
// host does), so ps_server and the node entry point both obey it.
absl::Status CheckListenAddressIsSafe(const std::string& address,
                                      const TransportSecurityOptions& options);

// The client's counterpart: plaintext to a non-loopback target.
absl::Status CheckTargetIsSafe(const std::string& target, bool tls,
                               bool allow_insecure);

// Reads a token file: the first line, surrounding whitespace removed.
// InvalidArgument naming the file when it is missing, unreadable or empty,
// or when its mode lets others (users outside its group) read or write it
// (a token anyone can read is no secret; chmod 600 it) unless
// `allow_readable`, which warns on stderr instead. Group access is left to
// the owner (Kubernetes' fsGroup mounts Secrets 0440).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          bool allow_readable = false);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_CREDENTIALS_H_
