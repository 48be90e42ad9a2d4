#include "server/replication_grpc.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"
#include "rpc/grpc_config.h"
#include "rpc/peer_identity.h"
#include "rpc/rpc_convert.h"

namespace downpour {
namespace {

static_assert(ShardReplica::kMaxJoinBytes < static_cast<size_t>(kMaxMessageBytes),
              "a join's snapshot travels in one message");

proto::ReplicaRole RoleToProto(ReplicaRole r) {
  switch (r) {
    case ReplicaRole::kPrimary:
      return proto::ROLE_PRIMARY;
    case ReplicaRole::kStandby:
      return proto::ROLE_STANDBY;
    case ReplicaRole::kFenced:
      return proto::ROLE_FENCED;
    case ReplicaRole::kStarting:
      break;
  }
  return proto::ROLE_UNKNOWN;
}

ReplicaRole RoleFromProto(proto::ReplicaRole r) {
  switch (r) {
    case proto::ROLE_PRIMARY:
      return ReplicaRole::kPrimary;
    case proto::ROLE_STANDBY:
      return ReplicaRole::kStandby;
    case proto::ROLE_FENCED:
      return ReplicaRole::kFenced;
    default:
      break;
  }
  return ReplicaRole::kStarting;
}

absl::StatusOr<ForwardKind> KindFromProto(proto::ForwardKind k) {
  if (k == proto::FORWARD_PUSH) return ForwardKind::kPush;
  if (k == proto::FORWARD_DECLARE) return ForwardKind::kDeclare;
  return absl::InvalidArgumentError(
      absl::StrCat("forward: unknown kind ", static_cast<int>(k)));
}

class ReplicationService final : public proto::Replication::CallbackService {
 public:
  ReplicationService(ShardReplica* const* replica,
                     const TokenAuthenticator* authenticator, int shard_index,
                     bool strict)
      : replica_(replica),
        authenticator_(authenticator),
        shard_index_(shard_index),
        strict_(strict) {}

  grpc::ServerUnaryReactor* Hello(grpc::CallbackServerContext* ctx,
                                  const proto::HelloRequest* req,
                                  proto::HelloResponse* resp) override {
    ShardReplica* r = nullptr;
    if (absl::Status s = Admit(*ctx, req->shard_index(), &r); !s.ok()) {
      return Finish(ctx, s);
    }
    const PeerState p = r->Hello();
    resp->set_role(RoleToProto(p.role));
    resp->set_epoch(p.epoch);
    resp->set_attached(p.attached);
    resp->set_has_standby(p.has_standby);
    return Finish(ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx,
                                 const proto::JoinRequest* req,
                                 proto::JoinResponse* resp) override {
    ShardReplica* r = nullptr;
    if (absl::Status s = Admit(*ctx, req->shard_index(), &r); !s.ok()) {
      return Finish(ctx, s);
    }
    absl::StatusOr<JoinState> st = r->OnJoin(ShardReplica::kMaxJoinBytes);
    if (st.ok()) {
      resp->set_epoch(st->epoch);
      resp->set_server_incarnation(st->server_incarnation);
      resp->set_declared(st->declared);
      resp->set_snapshot(std::move(st->snapshot));
      resp->set_pushes_applied(st->pushes_applied);
      resp->set_pushes_duplicate(st->pushes_duplicate);
    }
    return Finish(ctx, st.status());
  }

  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* ctx,
                                    const proto::ForwardRequest* req,
                                    proto::ForwardResponse* resp) override {
    ShardReplica* r = nullptr;
    if (absl::Status s = Admit(*ctx, shard_index_, &r); !s.ok()) {
      return Finish(ctx, s);
    }
    absl::StatusOr<ForwardKind> kind = KindFromProto(req->kind());
    if (!kind.ok()) return Finish(ctx, kind.status());
    absl::Status s =
        r->OnForward(req->epoch(), *kind, req->request(), [ctx] {
          return ctx->IsCancelled() ||
                 std::chrono::system_clock::now() >= ctx->deadline();
        });
    resp->set_epoch(r->epoch());
    return Finish(ctx, s);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const proto::HeartbeatRequest* req,
                                      proto::HeartbeatResponse* resp) override {
    ShardReplica* r = nullptr;
    if (absl::Status s = Admit(*ctx, shard_index_, &r); !s.ok()) {
      return Finish(ctx, s);
    }
    absl::Status s = r->OnHeartbeat(req->epoch());
    resp->set_epoch(r->epoch());
    return Finish(ctx, s);
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                          const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  // The token, the caller's certificate, the shard, and a replica to ask.
  absl::Status Admit(const grpc::CallbackServerContext& ctx, int shard,
                     ShardReplica** out) const {
    if (authenticator_ != nullptr) {
      if (absl::Status s = authenticator_->Check(ctx); !s.ok()) return s;
    }
    const PeerIdentity peer = PeerIdentityOf(ctx);
    const bool ok =
        peer.kind == PeerIdentity::Kind::kNone ||
        (peer.kind == PeerIdentity::Kind::kJob && !strict_) ||
        (peer.kind == PeerIdentity::Kind::kServer && peer.index == shard_index_);
    if (!ok) {
      return absl::PermissionDeniedError(absl::StrCat(
          "replication of shard ", shard_index_,
          " is only for its own processes, not the certificate '", peer.name,
          "'"));
    }
    if (shard != shard_index_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this process holds shard ", shard_index_, ", not ", shard));
    }
    ShardReplica* r = *replica_;
    if (r == nullptr) return absl::UnavailableError("replica starting");
    *out = r;
    return absl::OkStatus();
  }

  ShardReplica* const* const replica_;
  const TokenAuthenticator* const authenticator_;
  const int shard_index_;
  const bool strict_;
};

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

class GrpcReplicaPeer final : public ReplicaPeer {
 public:
  GrpcReplicaPeer(std::string address, std::shared_ptr<grpc::Channel> channel,
                  int shard_index)
      : address_(std::move(address)),
        stub_(proto::Replication::NewStub(channel)),
        shard_index_(shard_index) {}

  absl::StatusOr<PeerState> Hello(absl::Duration timeout) override {
    // A peer not listening yet answers at once, as without waiting.
    if (Refuses(timeout)) {
      return absl::UnavailableError(
          absl::StrCat(address_, " refuses connections"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    // Waits for a connection within the deadline: without it, a channel
    // whose earlier attempts failed (the peer was not listening yet) fails
    // the call at once, and nothing in a process with no server yet polls
    // the channel's next attempt, so a TLS handshake never completes.
    ctx.set_wait_for_ready(true);
    proto::HelloRequest req;
    req.set_shard_index(shard_index_);
    proto::HelloResponse resp;
    DP_RETURN_IF_ERROR(FromGrpc(stub_->Hello(&ctx, req, &resp)));
    PeerState p;
    p.role = RoleFromProto(resp.role());
    p.epoch = resp.epoch();
    p.attached = resp.attached();
    p.has_standby = resp.has_standby();
    return p;
  }

  absl::StatusOr<JoinState> Join(absl::Duration timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ctx.set_wait_for_ready(true);
    proto::JoinRequest req;
    req.set_shard_index(shard_index_);
    proto::JoinResponse resp;
    DP_RETURN_IF_ERROR(FromGrpc(stub_->Join(&ctx, req, &resp)));
    JoinState st;
    st.epoch = resp.epoch();
    st.server_incarnation = resp.server_incarnation();
    st.declared = resp.declared();
    st.snapshot = std::move(*resp.mutable_snapshot());
    st.pushes_applied = resp.pushes_applied();
    st.pushes_duplicate = resp.pushes_duplicate();
    return st;
  }

  absl::Status Forward(uint64_t epoch, ForwardKind kind,
                       const std::string& request,
                       absl::Duration timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    // A channel still backing off from an earlier refusal (the standby was
    // not up yet) reconnects within the deadline instead of failing.
    ctx.set_wait_for_ready(true);
    proto::ForwardRequest req;
    req.set_epoch(epoch);
    req.set_kind(kind == ForwardKind::kPush ? proto::FORWARD_PUSH
                                            : proto::FORWARD_DECLARE);
    req.set_request(request);
    proto::ForwardResponse resp;
    return FromGrpc(stub_->Forward(&ctx, req, &resp));
  }

  absl::Status Heartbeat(uint64_t epoch, absl::Duration timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ctx.set_wait_for_ready(true);
    proto::HeartbeatRequest req;
    req.set_epoch(epoch);
    proto::HeartbeatResponse resp;
    return FromGrpc(stub_->Heartbeat(&ctx, req, &resp));
  }

  bool Refuses(absl::Duration timeout) override;

  std::string address() const override { return address_; }

 private:
  const std::string address_;
  const std::unique_ptr<proto::Replication::Stub> stub_;
  const int shard_index_;
};

bool GrpcReplicaPeer::Refuses(absl::Duration timeout) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address_);
  if (!hp.ok()) return false;
  std::string host = hp->host;
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(hp->port).c_str(), &hints,
                  &res) != 0 ||
      res == nullptr) {
    return false;
  }
  bool refused = false;
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0 && errno == ECONNREFUSED) {
      refused = true;
    } else if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
      if (::poll(&p, 1, ms) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        refused = err == ECONNREFUSED;
      }
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  return refused;
}

}  // namespace

std::unique_ptr<grpc::Service> NewReplicationService(
    ShardReplica* const* replica, const TokenAuthenticator* authenticator,
    int shard_index, bool require_task_certificates) {
  return std::make_unique<ReplicationService>(
      replica, authenticator, shard_index, require_task_certificates);
}

absl::StatusOr<std::unique_ptr<ReplicaPeer>> NewGrpcReplicaPeer(
    const std::string& address, const TransportSecurityOptions& security,
    int shard_index) {
  absl::StatusOr<ClientSecurity> client = BuildClientSecurity(security);
  if (!client.ok()) return client.status();
  grpc::ChannelArguments args;
  ConfigureChannelArguments(&args);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // gRPC takes this as the least time a connection attempt (TCP, TLS
  // handshake, HTTP/2 settings) may take; 100 ms cut TLS handshakes short
  // on a busy host.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ch =
      CreateChannel(address, *client, args);
  if (!ch.ok()) return ch.status();
  return std::unique_ptr<ReplicaPeer>(
      new GrpcReplicaPeer(address, *std::move(ch), shard_index));
}

}  // namespace downpour
