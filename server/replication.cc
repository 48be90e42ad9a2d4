#include "server/replication.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace downpour {

const char* ReplicaRoleName(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kStarting:
      return "starting";
    case ReplicaRole::kPrimary:
      return "primary";
    case ReplicaRole::kStandby:
      return "standby";
    case ReplicaRole::kFenced:
      return "fenced";
  }
  return "unknown";
}

ShardReplica::ShardReplica(ReplicaOptions options,
                           std::unique_ptr<ReplicaPeer> peer,
                           ReplicaShard shard)
    : options_(std::move(options)),
      peer_(std::move(peer)),
      shard_(std::move(shard)),
      role_(options_.start_role),
      epoch_(options_.start_role == ReplicaRole::kPrimary ? options_.epoch : 0),
      incarnation_(options_.server_incarnation),
      last_contact_(absl::Now()),
      fenced_since_(absl::InfinitePast()) {}

absl::StatusOr<std::unique_ptr<ShardReplica>> ShardReplica::Create(
    ReplicaOptions options, std::unique_ptr<ReplicaPeer> peer,
    ReplicaShard shard) {
  if (peer == nullptr || !shard.apply || !shard.export_state ||
      !shard.import_state) {
    return absl::InvalidArgumentError("replica: peer and shard are required");
  }
  if (options.start_role != ReplicaRole::kPrimary &&
      options.start_role != ReplicaRole::kStandby) {
    return absl::InvalidArgumentError(
        "replica: a process starts as primary or standby");
  }
  if (options.lease < absl::Milliseconds(50)) {
    return absl::InvalidArgumentError("replica: the lease must be >= 50 ms");
  }
  std::unique_ptr<ShardReplica> r(
      new ShardReplica(std::move(options), std::move(peer), std::move(shard)));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

ShardReplica::~ShardReplica() { Stop(); }

void ShardReplica::Stop() {
  {
    absl::MutexLock l(&stop_mu_);
    stop_ = true;
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void ShardReplica::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "replica %d: %s\n", options_.shard_index, line.c_str());
  }
}

absl::Status ShardReplica::AdmitClient() const {
  absl::MutexLock l(&mu_);
  if (role_ == ReplicaRole::kPrimary) {
    // Fenced by time as well as by the timer thread: a primary whose
    // standby has been silent for a third of a lease takes nothing.
    if (has_standby_ && absl::Now() - last_contact_ > options_.lease / 3) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", options_.shard_index,
          ": primary without word from its standby; not serving"));
    }
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
      " (epoch ", epoch_, "); the shard's primary serves workers"));
}

absl::Status ShardReplica::ReplicateAndApply(
    ForwardKind kind, const std::string& request,
    const std::function<absl::Status()>& apply_here) {
  absl::ReaderMutexLock change(&change_mu_);
  uint64_t epoch = 0;
  bool forward = false;
  {
    absl::MutexLock l(&mu_);
    if (role_ != ReplicaRole::kPrimary) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
          " (epoch ", epoch_, "); the shard's primary serves workers"));
    }
    epoch = epoch_;
    forward = has_standby_;
  }
  if (forward) {
    const absl::Status s =
        peer_->Forward(epoch, kind, request, RpcTimeout());
    if (s.ok()) {
      absl::MutexLock l(&mu_);
      if (epoch_ == epoch) last_contact_ = absl::Now();
    } else {
      OnPeerFailure(s, epoch);
      absl::MutexLock l(&mu_);
      // Only a primary that now runs alone (its standby is gone) applies
      // a change its standby may not have.
      if (role_ != ReplicaRole::kPrimary || has_standby_ || epoch_ != epoch) {
        return absl::UnavailableError(absl::StrCat(
            "shard ", options_.shard_index,
            ": the change could not be replicated to the standby: ",
            s.message()));
      }
    }
  }
  return apply_here();
}

PeerState ShardReplica::Hello() const {
  absl::MutexLock l(&mu_);
  PeerState p;
  p.role = role_;
  p.epoch = epoch_;
  p.attached = attached_;
  p.has_standby = has_standby_;
  return p;
}

absl::StatusOr<JoinState> ShardReplica::OnJoin() {
  absl::WriterMutexLock change(&change_mu_);
  uint64_t epoch = 0;
  uint64_t incarnation = 0;
  {
    absl::MutexLock l(&mu_);
    if (role_ != ReplicaRole::kPrimary) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
          "; a standby joins a serving primary"));
    }
    epoch = epoch_;
    incarnation = incarnation_;
  }
  absl::StatusOr<JoinState> state = shard_.export_state();
  if (!state.ok()) return state.status();
  state->epoch = epoch;
  state->server_incarnation = incarnation;
  absl::MutexLock l(&mu_);
  if (epoch_ != epoch || role_ != ReplicaRole::kPrimary) {
    return absl::UnavailableError("the primary changed role during the join");
  }
  has_standby_ = true;
  last_contact_ = absl::Now();
  Log(absl::StrCat("standby at ", peer_->address(), " joined (epoch ", epoch,
                   state->declared ? ", with the shard's state" : "",
                   "); every change is replicated to it"));
  return state;
}

absl::Status ShardReplica::OnForward(uint64_t epoch, ForwardKind kind,
                                     const std::string& request) {
  absl::ReaderMutexLock apply(&apply_mu_);
  {
    absl::MutexLock l(&mu_);
    if (epoch < epoch_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", options_.shard_index, " is at epoch ", epoch_,
          "; epoch ", epoch, " was deposed"));
    }
    if (role_ != ReplicaRole::kStandby || !attached_) {
      return absl::AbortedError(absl::StrCat(
          "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
          attached_ ? "" : " and has not joined", "; it takes no forwards"));
    }
    epoch_ = epoch;
    last_contact_ = absl::Now();
  }
  // The primary applies the same request after this; an error of the
  // request itself is its answer there too.
  (void)shard_.apply(kind, request);
  absl::MutexLock l(&mu_);
  last_contact_ = absl::Now();
  return absl::OkStatus();
}

absl::Status ShardReplica::OnHeartbeat(uint64_t epoch) {
  absl::MutexLock l(&mu_);
  if (epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard_index, " is at epoch ", epoch_, "; epoch ",
        epoch, " was deposed"));
  }
  if (role_ != ReplicaRole::kStandby || !attached_) {
    return absl::AbortedError(absl::StrCat(
        "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
        attached_ ? "" : " and has not joined"));
  }
  epoch_ = epoch;
  last_contact_ = absl::Now();
  return absl::OkStatus();
}

ReplicaRole ShardReplica::role() const {
  absl::MutexLock l(&mu_);
  return role_;
}

uint64_t ShardReplica::epoch() const {
  absl::MutexLock l(&mu_);
  return epoch_;
}

uint64_t ShardReplica::server_incarnation() const {
  absl::MutexLock l(&mu_);
  return incarnation_;
}

void ShardReplica::Loop() {
  while (true) {
    {
      absl::MutexLock l(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), Heartbeat() / 2)) {
        return;
      }
    }
    Tick();
  }
}

void ShardReplica::Promote(const std::string& why) {
  ++epoch_;
  role_ = ReplicaRole::kPrimary;
  attached_ = false;
  has_standby_ = false;
  Log(absl::StrCat("promoted to primary (epoch ", epoch_, "): ", why,
                   "; running without a standby"));
}

void ShardReplica::Tick() {
  ReplicaRole role;
  uint64_t epoch;
  bool attached, has_standby, deposed;
  absl::Time last;
  {
    absl::MutexLock l(&mu_);
    role = role_;
    epoch = epoch_;
    attached = attached_;
    has_standby = has_standby_;
    deposed = deposed_;
    last = last_contact_;
  }
  const absl::Time now = absl::Now();
  switch (role) {
    case ReplicaRole::kStarting:
      return;
    case ReplicaRole::kStandby: {
      if (!attached) {
        TryJoin();
        return;
      }
      bool promoted = false;
      if (now - last > options_.lease) {
        absl::MutexLock l(&mu_);
        if (role_ == ReplicaRole::kStandby && attached_ &&
            absl::Now() - last_contact_ > options_.lease) {
          Promote(absl::StrCat("no word from the primary at ", peer_->address(),
                               " for ", absl::FormatDuration(options_.lease)));
          promoted = true;
        }
      } else if (now - last > 2 * Heartbeat() &&
                 peer_->Refuses(RpcTimeout())) {
        // A primary that is gone (nobody listens at its address) serves
        // nobody: no need to wait out the lease.
        absl::MutexLock l(&mu_);
        if (role_ == ReplicaRole::kStandby && attached_ &&
            absl::Now() - last_contact_ > 2 * Heartbeat()) {
          Promote(absl::StrCat("the primary's address ", peer_->address(),
                               " refuses connections"));
          promoted = true;
        }
      }
      if (promoted && options_.on_promoted) options_.on_promoted();
      return;
    }
    case ReplicaRole::kPrimary: {
      if (!has_standby || now - last < Heartbeat()) return;
      const absl::Status s = peer_->Heartbeat(epoch, RpcTimeout());
      if (s.ok()) {
        absl::MutexLock l(&mu_);
        if (epoch_ == epoch) last_contact_ = absl::Now();
        return;
      }
      OnPeerFailure(s, epoch);
      return;
    }
    case ReplicaRole::kFenced: {
      if (deposed) return;
      const absl::Status s = peer_->Heartbeat(epoch, RpcTimeout());
      if (s.ok()) {
        absl::MutexLock l(&mu_);
        if (role_ == ReplicaRole::kFenced && epoch_ == epoch && !deposed_) {
          role_ = ReplicaRole::kPrimary;
          last_contact_ = absl::Now();
          Log(absl::StrCat("reached the standby at ", peer_->address(),
                           " again (epoch ", epoch, "); serving"));
        }
        return;
      }
      OnPeerFailure(s, epoch);
      return;
    }
  }
}

void ShardReplica::OnPeerFailure(const absl::Status& failure, uint64_t epoch) {
  if (absl::IsFailedPrecondition(failure)) {
    bool newly = false;
    {
      absl::MutexLock l(&mu_);
      if (epoch_ == epoch && !deposed_ &&
          (role_ == ReplicaRole::kPrimary || role_ == ReplicaRole::kFenced)) {
        role_ = ReplicaRole::kFenced;
        deposed_ = true;
        newly = true;
        Log(absl::StrCat("deposed: ", failure.message(),
                         "; refusing workers, to rejoin as the standby"));
      }
    }
    if (newly && options_.on_deposed) options_.on_deposed();
    return;
  }
  if (absl::IsAborted(failure)) {
    // The peer holds no state of this epoch (it restarted, or never
    // joined): it cannot promote, so this primary goes on alone.
    absl::MutexLock l(&mu_);
    if (epoch_ == epoch && !deposed_ && has_standby_ &&
        (role_ == ReplicaRole::kPrimary || role_ == ReplicaRole::kFenced)) {
      has_standby_ = false;
      role_ = ReplicaRole::kPrimary;
      Log(absl::StrCat("the standby at ", peer_->address(),
                       " has not joined (", failure.message(),
                       "); running without a standby until it does"));
    }
    return;
  }
  const bool refused = peer_->Refuses(RpcTimeout());
  absl::MutexLock l(&mu_);
  if (epoch_ != epoch || deposed_ || !has_standby_ ||
      (role_ != ReplicaRole::kPrimary && role_ != ReplicaRole::kFenced)) {
    return;
  }
  // Refused: nobody listens at the standby's address, so it is not serving
  // and, gone before a lease without word could have passed, never
  // promoted.
  if (refused && absl::Now() - last_contact_ < options_.lease - RpcTimeout()) {
    has_standby_ = false;
    role_ = ReplicaRole::kPrimary;
    Log(absl::StrCat("the standby at ", peer_->address(),
                     " is gone (connection refused): running without a "
                     "standby"));
    return;
  }
  if (role_ == ReplicaRole::kPrimary) {
    role_ = ReplicaRole::kFenced;
    fenced_since_ = absl::Now();
    Log(absl::StrCat("cannot reach the standby at ", peer_->address(), " (",
                     failure.message(),
                     "): fenced, refusing workers until it answers"));
  }
}

void ShardReplica::TryJoin() {
  absl::WriterMutexLock apply(&apply_mu_);
  absl::StatusOr<PeerState> hello = peer_->Hello(RpcTimeout());
  if (!hello.ok() || hello->role != ReplicaRole::kPrimary) return;
  absl::StatusOr<JoinState> state =
      peer_->Join(std::max(absl::Seconds(30), 4 * options_.lease));
  if (!state.ok()) {
    Log(absl::StrCat("join of the primary at ", peer_->address(),
                     " failed: ", state.status().message(), "; retrying"));
    return;
  }
  if (absl::Status s = shard_.import_state(*state); !s.ok()) {
    Log(absl::StrCat("could not take the primary's state: ", s.message()));
    return;
  }
  absl::MutexLock l(&mu_);
  attached_ = true;
  epoch_ = state->epoch;
  incarnation_ = state->server_incarnation;
  last_contact_ = absl::Now();
  Log(absl::StrCat("standby of the primary at ", peer_->address(), " (epoch ",
                   epoch_, "): caught up",
                   state->declared ? " from its snapshot" : " (not declared yet)",
                   ", taking its changes"));
}

}  // namespace downpour
