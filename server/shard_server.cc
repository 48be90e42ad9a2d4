#include "server/shard_server.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/incarnation.h"
#include "common/job_identity.h"
#include "common/shard_stats.h"
#include "common/status_macros.h"
#include "common/train_mode.h"
#include "grpcpp/grpcpp.h"
#include "rpc/auth_token.h"
#include "rpc/net_probe.h"
#include "server/replication_grpc.h"
#include "server/standby_shard.h"
#include "server/sandblaster_service.h"

namespace downpour {
namespace {

// A restore's, snapshot's or job end's line for shard `shard_index`.
std::function<void(const std::string&)> ShardLog(int shard_index) {
  return [shard_index](const std::string& m) {
    std::printf("ps_server: shard %d: %s\n", shard_index, m.c_str());
    std::fflush(stdout);
  };
}

// ", warm-up N updates, cosine to F of the rate at M updates, weight decay
// D" as far as the optimizer has them; empty for a constant rate.
std::string DescribeSchedule(const OptimizerOptions& o) {
  const LrSchedule& sched = o.schedule;
  std::string schedule;
  if (sched.warmup_updates > 0) {
    schedule += absl::StrCat(", warm-up ", sched.warmup_updates, " updates");
  }
  if (sched.decay == "cosine") {
    // "cosine to 0 at 938 updates", "cosine to 0.1 of the rate at ...".
    schedule += absl::StrCat(
        ", cosine to ",
        sched.min_factor == 0 ? std::string("0")
                              : absl::StrCat(sched.min_factor, " of the rate"),
        " at ", sched.decay_updates, " updates");
  } else if (sched.decay == "step") {
    schedule += absl::StrCat(", x", sched.step_gamma, " every ",
                             sched.step_every, " updates");
  }
  if (o.weight_decay > 0) {
    schedule += absl::StrCat(", weight decay ", o.weight_decay);
  }
  return schedule;
}

}  // namespace

ShardServer::ShardServer(ShardServerOptions options)
    : options_(std::move(options)) {}

ShardServer::~ShardServer() {
  if (replica_ != nullptr) replica_->Stop();
}

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(
    ShardServerOptions options) {
  std::unique_ptr<ShardServer> server(new ShardServer(std::move(options)));
  DP_RETURN_IF_ERROR(server->Start());
  return server;
}

absl::Status ShardServer::Start() {
  ParameterServerHostOptions& host_options = options_.host;
  const ParameterStoreOptions& store_options = host_options.store;
  if (options_.spec.has_value()) {
    // One token check for the host's services and job control.
    if (host_options.authenticator == nullptr) {
      DP_ASSIGN_OR_RETURN(host_options.authenticator,
                          TokenAuthenticator::Create(host_options.security));
    }
    AttachJobControl();
  }
  if (store_options.mode == TrainMode::kSandblaster) {
    if (host_options.authenticator == nullptr) {
      DP_ASSIGN_OR_RETURN(host_options.authenticator,
                          TokenAuthenticator::Create(host_options.security));
    }
    sandblaster_service_ = NewSandblasterShardService(
        [store = &serving_store_] { return store->load(); },
        host_options.authenticator.get(),
        {store_options.num_workers > 0 ? store_options.num_workers : 1,
         host_options.security.require_task_certificates});
    host_options.extra_services.push_back(sandblaster_service_.get());
  }
  // Restore before serving; snapshots while serving.
  const std::function<void(const std::string&)> log =
      ShardLog(store_options.shard_index);
  const std::string checkpoint_dir = options_.snapshots.dir;
  if (!checkpoint_dir.empty()) {
    DP_RETURN_IF_ERROR(
        ClaimCheckpointDir(checkpoint_dir, options_.job_identity));
    host_options.prepare_store =
        [checkpoint_dir, shard = store_options.shard_index,
         shards = store_options.num_shards, log,
         start_empty = options_.snapshots.start_empty_if_unusable](
            ParameterStore* store) {
          return RestoreLatestSnapshot(checkpoint_dir, shard, shards, store,
                                       log, start_empty);
        };
  }
  // A fixed port already taken is said in one line here; gRPC would log
  // a multi-line error of its own first.
  for (const std::string& address : host_options.listen_addresses) {
    if (absl::EndsWith(address, ":0")) continue;
    if (absl::Status why = ProbeListen(address); absl::IsUnavailable(why)) {
      return why;
    }
  }
  if (!options_.replica_peer.empty()) DP_RETURN_IF_ERROR(StartReplica());
  absl::StatusOr<std::unique_ptr<ParameterServerHost>> host =
      ParameterServerHost::Create(host_options);
  if (!host.ok()) {
    if (host.status().code() == absl::StatusCode::kUnavailable &&
        !host_options.listen_addresses.empty()) {
      // Say why the address cannot be listened on (gRPC does not).
      const absl::Status why = ProbeListen(host_options.listen_addresses[0]);
      if (!why.ok()) return absl::UnavailableError(why.message());
    }
    return host.status();
  }
  host_ = *std::move(host);
  serving_store_.store(host_->store());
  serving_host_.store(host_.get());
  // Memory a burst took (refused oversize messages, a load spike) goes
  // back once the shard is idle.
  HeapTrimmerOptions trim;
  trim.min_free_bytes = options_.heap_trim_min_mb << 20;
  trim.activity = [store = host_->store()] {
    const ShardStats s = store->Stats();
    return s.pulls + s.pushes_applied + s.pushes_duplicate;
  };
  trimmer_ = std::make_unique<HeapTrimmer>(std::move(trim));
  if (!checkpoint_dir.empty()) {
    SnapshotterOptions so = options_.snapshots;
    so.log = log;
    snapshotter_ = std::make_unique<Snapshotter>(std::move(so), host_->store());
  }
  if (options_.max_connections > 0) {
    ConnectionGuardOptions go;
    for (size_t a = 0; a < host_options.listen_addresses.size(); ++a) {
      go.ports.push_back(host_->port(static_cast<int>(a)));
    }
    go.max_connections = options_.max_connections;
    go.log = log;
    go.on_stall = [this, log](const std::string& why) {
      log(absl::StrCat(why, "; stopping (exit 3) to be restarted"));
      listener_lost_.store(true);
      ::kill(::getpid(), SIGTERM);
    };
    DP_ASSIGN_OR_RETURN(guard_, ConnectionGuard::Start(std::move(go)));
  }
  return Announce();
}

absl::Status ShardServer::StartReplica() {
  ParameterServerHostOptions& host_options = options_.host;
  const int shard = host_options.store.shard_index;
  const std::function<void(const std::string&)> log = ShardLog(shard);
  if (host_options.store.mode == TrainMode::kSandblaster) {
    return absl::InvalidArgumentError(
        "standby shards replicate async, sync and ssp jobs; a sandblaster "
        "job runs without --ps_standby_hosts");
  }
  DP_ASSIGN_OR_RETURN(
      std::unique_ptr<ReplicaPeer> peer,
      NewGrpcReplicaPeer(options_.replica_peer, host_options.security, shard));
  DP_ASSIGN_OR_RETURN(
      const ReplicaRole role,
      DecideStartRole(peer.get(), options_.standby_task, absl::Minutes(10), log,
                      options_.stop));
  ReplicaOptions ro;
  ro.shard_index = shard;
  ro.start_role = role;
  ro.lease = options_.standby_lease;
  ro.server_incarnation = NewIncarnation();
  ro.log = log;
  ro.on_deposed = [this] {
    deposed_.store(true);
    ::kill(::getpid(), SIGTERM);
  };
  // A promoted standby serves: its health turns SERVING (a standby's stays
  // NOT_SERVING, as it refuses workers).
  ro.on_promoted = [this] {
    ParameterServerHost* host = serving_host_.load();
    if (host != nullptr && host->store()->Stats().initialized) {
      host->SetServing(true);
    }
  };
  log(absl::StrCat("starting as the ", ReplicaRoleName(role), " (peer ",
                   options_.replica_peer, ")"));
  // A standby takes its primary's state, never a snapshot of its own.
  if (role == ReplicaRole::kStandby) host_options.prepare_store = nullptr;
  // A primary with no peer restores the newer of its own folder and its
  // standby's: after a failover the promoted standby wrote the newest.
  const std::string peer_dir =
      PeerCheckpointDir(options_.snapshots.dir, shard);
  if (role == ReplicaRole::kPrimary && host_options.prepare_store &&
      !peer_dir.empty()) {
    host_options.prepare_store =
        [dir = options_.snapshots.dir, peer_dir, shard,
         shards = host_options.store.num_shards, log,
         start_empty = options_.snapshots.start_empty_if_unusable](
            ParameterStore* store) {
          return RestoreLatestSnapshot(
              NewerCheckpointDir(dir, peer_dir, shard, shards, log), shard,
              shards, store, log, start_empty);
        };
  }
  host_options.service.server_incarnation = ro.server_incarnation;
  DP_ASSIGN_OR_RETURN(
      replica_,
      ShardReplica::Create(
          std::move(ro), std::move(peer),
          StoreReplicaShard([store = &serving_store_] { return store->load(); })));
  replica_ptr_ = replica_.get();
  host_options.service.replica = replica_.get();
  replication_service_ = NewReplicationService(
      &replica_ptr_, host_options.authenticator.get(), shard,
      host_options.security.require_task_certificates);
  host_options.extra_services.push_back(replication_service_.get());
  return absl::OkStatus();
}

void ShardServer::AttachJobControl() {
  ParameterServerHostOptions& host_options = options_.host;
  std::printf("ps_server: %s\n", ClusterSpecToString(*options_.spec).c_str());
  job_ = std::make_unique<JobState>(host_options.store.num_workers,
                                    host_options.store.optimizer.name,
                                    options_.lr);
  job_service_ = NewJobControlService(
      job_.get(),
      [store = &serving_store_] {
        const ParameterStore* s = store->load();
        return s == nullptr ? std::string() : s->Stats().aborted;
      },
      host_options.authenticator.get(),
      host_options.security.require_task_certificates);
  host_options.extra_services.push_back(job_service_.get());
}

absl::Status ShardServer::Announce() {
  const ParameterServerHostOptions& host_options = options_.host;
  const ParameterStoreOptions& o = host_options.store;
  if (host_->metrics_port() >= 0) {
    std::printf("ps_server: metrics on http://%s:%d/metrics\n",
                host_options.metrics_bind.c_str(), host_->metrics_port());
  }
  std::printf(
      "ps_server: shard %d of %d (%s mode, %s, lr %g%s) listening on %s\n",
      o.shard_index, o.num_shards, TrainModeName(o.mode),
      o.optimizer.name.c_str(), o.optimizer.learning_rate,
      DescribeSchedule(o.optimizer).c_str(), host_->address().c_str());
  std::fflush(stdout);
  if (options_.port_file.empty()) return absl::OkStatus();
  // Atomically, so a reader polling the file never sees a partial port.
  const absl::Status written = AtomicWriteFile(
      options_.port_file, absl::StrCat(host_->port(), "\n"));
  if (written.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("could not write --port_file ",
                                             options_.port_file, ": ",
                                             written.message()));
}

JobEnd ShardServer::WaitUntilDone(const absl::Notification& stop) {
  JobEnd end;
  if (job_ == nullptr) {
    stop.WaitForNotification();
    return end;
  }
  end = WaitForJobEnd(job_.get(), *host_->store(), &stop);
  Log(end.reason);
  return end;
}

int ShardServer::Run(const absl::Notification& stop) {
  JobEnd end = WaitUntilDone(stop);
  guard_.reset();
  if (replica_ != nullptr) replica_->Stop();
  if (deposed_.load()) {
    end.exit_code = 3;
    end.reason = "deposed by its standby's promotion; restart to rejoin as "
                 "the standby";
  }
  if (listener_lost_.load()) {
    end.exit_code = 3;
    end.reason = "the listener stopped accepting connections";
  }
  // Waiting pulls are answered first, then the server stops.
  host_->Shutdown(absl::Seconds(2));
  host_->Wait();
  if (snapshotter_ != nullptr) {  // The final snapshot, of a drained shard.
    snapshotter_->Stop();
    const absl::Status s = snapshotter_->WriteNow();
    if (!s.ok()) Log(absl::StrCat("final snapshot failed: ", s.message()));
    // A spec job that ended well (not stopped by a signal): its snapshots
    // must not be taken for a job to resume (common/job_identity.h).
    if (job_ != nullptr && end.exit_code == 0 && !stop.HasBeenNotified()) {
      const absl::Status m = MarkJobFinished(options_.snapshots.dir);
      if (!m.ok()) Log(std::string(m.message()));
    }
  }
  const int shard_index = options_.host.store.shard_index;
  std::printf("ps_server: shard %d stopped: %s\n", shard_index,
              ShardStatsToJson(host_->store()->Stats()).c_str());
  std::fflush(stdout);
  if (end.exit_code != 0) {
    std::fprintf(stderr, "ps_server: shard %d: exiting with status %d: %s\n",
                 shard_index, end.exit_code, end.reason.c_str());
  }
  return end.exit_code;
}

void ShardServer::Log(const std::string& message) const {
  ShardLog(options_.host.store.shard_index)(message);
}

}  // namespace downpour
