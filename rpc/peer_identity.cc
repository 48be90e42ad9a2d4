#include "rpc/peer_identity.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/auth_context.h"

namespace downpour {
namespace {

// "<prefix><decimal index>" -> index, else -1.
int64_t IndexAfter(absl::string_view cn, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&cn, prefix) || cn.empty() || cn.size() > 9) return -1;
  for (char c : cn) {
    if (c < '0' || c > '9') return -1;
  }
  int64_t index = -1;
  return absl::SimpleAtoi(cn, &index) ? index : -1;
}

}  // namespace

PeerIdentity PeerIdentityFromName(absl::string_view cn) {
  PeerIdentity p;
  p.name = std::string(cn);
  if (cn.empty()) return p;
  if ((p.index = IndexAfter(cn, "worker-")) >= 0) {
    p.kind = PeerIdentity::Kind::kWorker;
  } else if ((p.index = IndexAfter(cn, "ps-")) >= 0) {
    p.kind = PeerIdentity::Kind::kServer;
  } else {
    p.kind = PeerIdentity::Kind::kJob;
  }
  return p;
}

PeerIdentity PeerIdentityOf(const grpc::ServerContextBase& ctx) {
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return PeerIdentity();
  const std::vector<grpc::string_ref> cn =
      auth->FindPropertyValues("x509_common_name");
  if (cn.empty()) return PeerIdentity();
  return PeerIdentityFromName(absl::string_view(cn[0].data(), cn[0].size()));
}

absl::Status CheckActsForWorker(const PeerIdentity& peer, int64_t worker_id,
                                bool require_task_certificates) {
  switch (peer.kind) {
    case PeerIdentity::Kind::kNone:
      return absl::OkStatus();
    case PeerIdentity::Kind::kWorker:
      if (peer.index == worker_id) return absl::OkStatus();
      break;
    case PeerIdentity::Kind::kJob:
      if (!require_task_certificates) return absl::OkStatus();
      return absl::PermissionDeniedError(absl::StrCat(
          "certificate \"", peer.name, "\" is not a task's: this server takes "
          "worker ", worker_id, "'s calls only from \"worker-", worker_id,
          "\" (--require_task_certificates)"));
    case PeerIdentity::Kind::kServer:
      break;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "certificate \"", peer.name, "\" may not act for worker ", worker_id,
      ": only \"worker-", worker_id, "\" may"));
}

}  // namespace downpour
