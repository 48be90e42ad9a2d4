// File: deploy/launch_security.h
//
// The launcher's part of transport security: the TLS and token flags
// it passes to every child, either its own --tls_cert/--tls_key/--tls_ca/
// --auth_token_file or, with --secure, a CA, certificates and a token made
// for this job by deploy/make_certs.sh (openssl), so that the secure path of
// a local job is one word:
//
//   launch --secure --servers=2 --workers=2
//
//   DP_ASSIGN_OR_RETURN(TransportSecurityOptions s,
//                       MakeJobCredentials(script, dir));  // --secure
//   options.security_args = SecurityArgsFor(s);   // rpc/security_flags.h
//
// Thread-compatible; MakeJobCredentials runs a child process.
#ifndef DOWNPOUR_DEPLOY_LAUNCH_SECURITY_H_
#define DOWNPOUR_DEPLOY_LAUNCH_SECURITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "rpc/credentials.h"

namespace downpour {

// Runs `bash make_certs_script --ps=servers --workers=workers dir` and
// returns options naming the job-wide files it wrote: mutual TLS with the
// job's CA, server.pem (valid for serverAuth and clientAuth, and for
// localhost, 127.0.0.1 and ::1) and the token. The per-task certificates
// (ps-<k>, worker-<i>) are in `dir` too (LaunchOptions::task_cert_dir).
// Internal error with the script's output when it fails.
absl::StatusOr<TransportSecurityOptions> MakeJobCredentials(
    const std::string& make_certs_script, const std::string& dir,
    int servers, int workers);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_LAUNCH_SECURITY_H_
