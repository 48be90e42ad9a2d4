// File: rpc/peer_identity.h
//
// Who is calling, by the subject Common Name of the client certificate a
// call came with (mutual TLS), and what that name may do. deploy/
// make_certs.sh issues one certificate per task: `ps-<k>` for server k,
// `worker-<k>` for worker k (worker 0 is the chief), besides the job-wide
// `downpour-server` / `downpour-client` ones.
//
//   const PeerIdentity peer = PeerIdentityOf(*ctx);
//   DP_RETURN_IF_ERROR(CheckActsForWorker(peer, push.worker_id, strict));
//
// The rule: a call that acts for worker k (a push, a leave, a job report)
// is accepted from `worker-<k>`, from a job-wide certificate unless task
// certificates are required, and from a caller with no client certificate
// (plaintext on loopback or with --allow_insecure: the workers are trusted
// there, as they cannot be told apart). Anything else is PERMISSION_DENIED
// naming the certificate and the worker: `worker-1` cannot push as worker
// 0, nor a server's certificate as anyone.
//
// Thread-safety: pure functions.
#ifndef DOWNPOUR_RPC_PEER_IDENTITY_H_
#define DOWNPOUR_RPC_PEER_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace downpour {

struct PeerIdentity {
  enum class Kind {
    kNone,    // No client certificate.
    kWorker,  // "worker-<index>"
    kServer,  // "ps-<index>"
    kJob,     // Any other name: a certificate for the whole job.
  };
  Kind kind = Kind::kNone;
  int64_t index = -1;  // kWorker, kServer.
  std::string name;    // The Common Name; empty for kNone.
};

// The identity a certificate with Common Name `cn` gives.
PeerIdentity PeerIdentityFromName(absl::string_view cn);

// The identity of the call's client certificate (kNone without one).
PeerIdentity PeerIdentityOf(const grpc::ServerContextBase& ctx);

// OK when `peer` may act for worker `worker_id` (see the file comment);
// with `require_task_certificates`, a job-wide certificate may not.
absl::Status CheckActsForWorker(const PeerIdentity& peer, int64_t worker_id,
                                bool require_task_certificates);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_PEER_IDENTITY_H_
