#include "rpc/security_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

// Transport security (README "Security").
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this process (TLS). deploy/make_certs.sh makes one.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate: servers require client certificates signed by "
          "it, clients verify the server's against it (mutual TLS).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the job's bearer token: sent on every call by "
          "clients, required by servers.");
ABSL_FLAG(bool, allow_insecure, false,
          "Allow plaintext listening on / connecting to non-loopback "
          "addresses (trusted networks only).");
ABSL_FLAG(bool, require_task_certificates, false,
          "Servers with mutual TLS: take pushes and job reports for worker k "
          "only from the client certificate named worker-<k> "
          "(deploy/make_certs.sh --workers=W issues them), never from a "
          "job-wide certificate. Certificates named worker-<k> are held to "
          "their index either way.");
ABSL_FLAG(bool, allow_readable_token_file, false,
          "Accept an --auth_token_file that others (users outside its group) "
          "may read or write, with a warning; otherwise it is refused: chmod "
          "600 it.");

namespace downpour {

absl::StatusOr<TransportSecurityOptions> SecurityOptionsFromFlags() {
  absl::StatusOr<TransportSecurityOptions> o = MakeSecurityOptions(
      absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_auth_token_file),
      absl::GetFlag(FLAGS_allow_insecure));
  if (o.ok()) {
    o->allow_readable_token_file =
        absl::GetFlag(FLAGS_allow_readable_token_file);
    o->require_task_certificates =
        absl::GetFlag(FLAGS_require_task_certificates);
  }
  return o;
}

std::vector<std::string> SecurityArgsFor(const TransportSecurityOptions& o) {
  std::vector<std::string> args;
  auto add = [&args](const char* name, const std::string& v) {
    if (!v.empty()) args.push_back(absl::StrCat("--", name, "=", v));
  };
  add("tls_cert", o.tls_cert_file);
  add("tls_key", o.tls_key_file);
  add("tls_ca", o.tls_ca_file);
  add("auth_token_file", o.auth_token_file);
  if (o.allow_insecure) args.push_back("--allow_insecure");
  if (o.allow_readable_token_file) {
    args.push_back("--allow_readable_token_file");
  }
  if (o.require_task_certificates) {
    args.push_back("--require_task_certificates");
  }
  return args;
}

}  // namespace downpour
