#include "deploy/launch_security.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "deploy/subprocess.h"

namespace downpour {

absl::StatusOr<TransportSecurityOptions> MakeJobCredentials(
    const std::string& make_certs_script, const std::string& dir, int servers,
    int workers) {
  SubprocessOptions so;
  so.argv = {"/bin/bash", make_certs_script, absl::StrCat("--ps=", servers),
             absl::StrCat("--workers=", workers), dir};
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(so));
  std::vector<std::string> lines;
  if (!p->WaitFor(absl::Seconds(60), &lines) || !p->exit_status().success()) {
    return absl::InternalError(absl::StrCat(
        "--secure: ", make_certs_script, " ", dir, " failed: ",
        absl::StrJoin(lines, " | ")));
  }
  TransportSecurityOptions s;
  s.mode = TransportSecurityOptions::Mode::kTls;
  s.tls_cert_file = dir + "/server.pem";
  s.tls_key_file = dir + "/server.key";
  s.tls_ca_file = dir + "/ca.pem";
  s.auth_token_file = dir + "/token";
  // The files are checked here, once, rather than by every child.
  DP_RETURN_IF_ERROR(BuildServerCredentials(s).status());
  DP_RETURN_IF_ERROR(ReadTokenFile(s.auth_token_file).status());
  return s;
}

}  // namespace downpour
