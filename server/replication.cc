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
  uint64_t gen = 0;
  bool forward = false;
  {
    absl::MutexLock l(&mu_);
    if (role_ != ReplicaRole::kPrimary) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
          " (epoch ", epoch_, "); the shard's primary serves workers"));
    }
    epoch = epoch_;
    gen = standby_gen_;
    forward = has_standby_;
  }
  if (forward) {
    const absl::Status s =
        peer_->Forward(epoch, kind, request, ForwardTimeout(request.size()));
    if (s.ok()) {
      absl::MutexLock l(&mu_);
      if (epoch_ == epoch) last_contact_ = absl::Now();
    } else {
      OnPeerFailure(s, epoch, gen);
      const absl::Status refused = absl::UnavailableError(absl::StrCat(
          "shard ", options_.shard_index,
          ": the change could not be replicated to the standby: ",
          s.message()));
      {
        absl::MutexLock l(&mu_);
        // A primary that now runs alone (its standby is gone or holds
        // nothing) applies and acknowledges the change.
        const bool alone = role_ == ReplicaRole::kPrimary && !has_standby_ &&
                           epoch_ == epoch;
        if (!alone) {
          // Deposed: the new primary's state is the shard's; nothing to do.
          if (deposed_ || epoch_ != epoch || absl::IsFailedPrecondition(s)) {
            return refused;
          }
          // Fenced, the standby may have applied the change: it is applied
          // here too (not acknowledged: the worker retries, deduplicated)
          // and forwarded again before this primary serves again, so that
          // both replicas hold it whatever the standby did.
          uncertain_[next_uncertain_++] = Uncertain{kind, request};
        }
        if (alone) return apply_here();
      }
      (void)apply_here();
      return refused;
    }
  }
  return apply_here();
}

absl::Duration ShardReplica::ForwardTimeout(size_t bytes) const {
  return RpcTimeout() +
         absl::Seconds(static_cast<double>(bytes) / kForwardBytesPerSecond);
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

absl::StatusOr<JoinState> ShardReplica::OnJoin(size_t max_snapshot_bytes) {
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
  if (state->snapshot.size() > max_snapshot_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shard ", options_.shard_index, ": its state (",
        state->snapshot.size(), " bytes) is over the join's limit of ",
        max_snapshot_bytes, " bytes; it cannot take a standby"));
  }
  state->epoch = epoch;
  state->server_incarnation = incarnation;
  absl::MutexLock l(&mu_);
  if (epoch_ != epoch || role_ != ReplicaRole::kPrimary) {
    return absl::UnavailableError("the primary changed role during the join");
  }
  has_standby_ = true;
  ++standby_gen_;
  // The snapshot holds every change applied here, those of uncertain fate
  // included.
  uncertain_.clear();
  last_contact_ = absl::Now();
  Log(absl::StrCat("standby at ", peer_->address(), " joined (epoch ", epoch,
                   state->declared ? ", with the shard's state" : "",
                   "); every change is replicated to it"));
  return state;
}

absl::Status ShardReplica::OnForward(
    uint64_t epoch, ForwardKind kind, const std::string& request,
    const std::function<bool()>& abandoned) {
  {
    // A join under way holds apply_mu_ for as long as it takes the state:
    // answer at once rather than wait.
    absl::MutexLock l(&mu_);
    if (absl::Status s = CheckCall(epoch); !s.ok()) return s;
  }
  absl::ReaderMutexLock apply(&apply_mu_);
  {
    absl::MutexLock l(&mu_);
    if (absl::Status s = CheckCall(epoch); !s.ok()) return s;
    if (abandoned && abandoned()) {
      // The primary gave up on this call (it fenced itself and forwards
      // the change again before it serves): not applied.
      return absl::DeadlineExceededError(absl::StrCat(
          "shard ", options_.shard_index,
          ": the forward was abandoned by its sender; not applied"));
    }
    epoch_ = epoch;
    confirmed_ = true;
    last_contact_ = absl::Now();
  }
  // The primary applies the same request after this; an error of the
  // request itself is its answer there too.
  (void)shard_.apply(kind, request);
  absl::MutexLock l(&mu_);
  last_contact_ = absl::Now();
  return absl::OkStatus();
}

absl::Status ShardReplica::CheckCall(uint64_t epoch) const {
  if (epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard_index, " is at epoch ", epoch_, "; epoch ",
        epoch, " was deposed"));
  }
  if (role_ == ReplicaRole::kStandby && joining_) {
    // Not ABORTED: a primary that heard ABORTED goes on alone, and this
    // standby is about to hold its state.
    return absl::UnavailableError(absl::StrCat(
        "shard ", options_.shard_index,
        " here is a standby still taking its primary's state"));
  }
  if (role_ != ReplicaRole::kStandby || !attached_) {
    // Holds no state of the caller's and takes none: it cannot promote.
    return absl::AbortedError(absl::StrCat(
        "shard ", options_.shard_index, " here is ", ReplicaRoleName(role_),
        attached_ ? "" : " and has not joined"));
  }
  return absl::OkStatus();
}

absl::Status ShardReplica::OnHeartbeat(uint64_t epoch) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = CheckCall(epoch); !s.ok()) return s;
  epoch_ = epoch;
  confirmed_ = true;
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
  confirmed_ = false;
  has_standby_ = false;
  uncertain_.clear();
  Log(absl::StrCat("promoted to primary (epoch ", epoch_, "): ", why,
                   "; running without a standby"));
}

void ShardReplica::RunAlone() {
  has_standby_ = false;
  role_ = ReplicaRole::kPrimary;
  // Applied here already; there is no standby to forward them to.
  uncertain_.clear();
}

void ShardReplica::Tick() {
  ReplicaRole role;
  uint64_t epoch, gen;
  bool attached, has_standby, deposed;
  absl::Time last;
  {
    absl::MutexLock l(&mu_);
    role = role_;
    epoch = epoch_;
    gen = standby_gen_;
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
          if (confirmed_) {
            Promote(absl::StrCat("no word from the primary at ",
                                 peer_->address(), " for ",
                                 absl::FormatDuration(options_.lease)));
            promoted = true;
          } else {
            // Joined, but no forward or heartbeat came since: the primary
            // may not count this process as its standby (the join's answer
            // came after it gave up on it). Its lease never started; join
            // again.
            attached_ = false;
            Log(absl::StrCat("no word from the primary at ", peer_->address(),
                             " since the join; joining again"));
          }
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
      OnPeerFailure(s, epoch, gen);
      return;
    }
    case ReplicaRole::kFenced: {
      if (deposed) return;
      TickFenced(epoch, gen);
      return;
    }
  }
}

void ShardReplica::TickFenced(uint64_t epoch, uint64_t gen) {
  std::map<uint64_t, Uncertain> again;
  {
    absl::MutexLock l(&mu_);
    again = uncertain_;
  }
  absl::Status s = absl::OkStatus();
  for (const auto& [id, change] : again) {
    s = peer_->Forward(epoch, change.kind, change.request,
                       ForwardTimeout(change.request.size()));
    if (!s.ok()) break;
  }
  if (s.ok()) s = peer_->Heartbeat(epoch, RpcTimeout());
  if (!s.ok()) {
    OnPeerFailure(s, epoch, gen);
    return;
  }
  absl::MutexLock l(&mu_);
  if (role_ != ReplicaRole::kFenced || epoch_ != epoch || deposed_ ||
      standby_gen_ != gen) {
    return;
  }
  for (const auto& [id, change] : again) uncertain_.erase(id);
  last_contact_ = absl::Now();
  if (!uncertain_.empty()) return;  // More came meanwhile: next tick.
  role_ = ReplicaRole::kPrimary;
  Log(absl::StrCat("reached the standby at ", peer_->address(),
                   " again (epoch ", epoch, ")",
                   again.empty() ? "" : ", with the changes of unknown fate",
                   "; serving"));
}

void ShardReplica::OnPeerFailure(const absl::Status& failure, uint64_t epoch,
                                 uint64_t gen) {
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
    // The peer holds no state of this epoch and is not taking any (it
    // restarted, or its join failed): it cannot promote without joining
    // again, so this primary goes on alone. An answer to a call made before
    // the latest join (gen) says nothing of the standby that joined since.
    absl::MutexLock l(&mu_);
    if (epoch_ == epoch && standby_gen_ == gen && !deposed_ && has_standby_ &&
        (role_ == ReplicaRole::kPrimary || role_ == ReplicaRole::kFenced)) {
      RunAlone();
      Log(absl::StrCat("the standby at ", peer_->address(),
                       " has not joined (", failure.message(),
                       "); running without a standby until it does"));
    }
    return;
  }
  const bool refused = peer_->Refuses(RpcTimeout());
  absl::MutexLock l(&mu_);
  if (epoch_ != epoch || standby_gen_ != gen || deposed_ || !has_standby_ ||
      (role_ != ReplicaRole::kPrimary && role_ != ReplicaRole::kFenced)) {
    return;
  }
  // Refused: nobody listens at the standby's address, so it is not serving
  // and, gone before a lease without word could have passed, never
  // promoted.
  if (refused && absl::Now() - last_contact_ < options_.lease - RpcTimeout()) {
    RunAlone();
    Log(absl::StrCat("the standby at ", peer_->address(),
                     " is gone (connection refused): running without a "
                     "standby"));
    return;
  }
  // Anything else (unreachable, a timeout, a standby still taking the
  // join's state): the standby may be alive, so never alone.
  if (role_ == ReplicaRole::kPrimary) {
    role_ = ReplicaRole::kFenced;
    fenced_since_ = absl::Now();
    Log(absl::StrCat("cannot reach the standby at ", peer_->address(), " (",
                     failure.message(),
                     "): fenced, refusing workers until it answers"));
  }
}

void ShardReplica::TryJoin() {
  if (absl::Now() < next_join_) return;
  absl::StatusOr<PeerState> hello = peer_->Hello(RpcTimeout());
  if (!hello.ok() || hello->role != ReplicaRole::kPrimary) return;
  {
    absl::MutexLock l(&mu_);
    if (role_ != ReplicaRole::kStandby || attached_) return;
    // From here until the state is taken, forwards and heartbeats are
    // answered UNAVAILABLE: the primary fences itself rather than going on
    // alone while this process is about to hold its state.
    joining_ = true;
  }
  // No lock held across the call (the primary holds its changes meanwhile).
  absl::StatusOr<JoinState> state =
      peer_->Join(std::max(absl::Seconds(30), 4 * options_.lease));
  absl::Status taken = state.status();
  if (state.ok()) {
    absl::WriterMutexLock apply(&apply_mu_);
    taken = shard_.import_state(*state);
  }
  absl::MutexLock l(&mu_);
  joining_ = false;
  if (!taken.ok()) {
    // Each join makes the primary hold its changes while it exports the
    // state: back off.
    join_backoff_ = std::min(
        absl::Seconds(30),
        std::max(Heartbeat() / 2, 2 * join_backoff_));
    next_join_ = absl::Now() + join_backoff_;
    Log(absl::StrCat("join of the primary at ", peer_->address(), " failed: ",
                     taken.message(), "; retrying in ",
                     absl::FormatDuration(join_backoff_)));
    return;
  }
  join_backoff_ = absl::ZeroDuration();
  attached_ = true;
  confirmed_ = false;
  epoch_ = state->epoch;
  incarnation_ = state->server_incarnation;
  last_contact_ = absl::Now();
  Log(absl::StrCat("standby of the primary at ", peer_->address(), " (epoch ",
                   epoch_, "): caught up",
                   state->declared ? " from its snapshot" : " (not declared yet)",
                   ", taking its changes"));
}

}  // namespace downpour
