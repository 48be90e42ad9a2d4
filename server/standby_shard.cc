#include "server/standby_shard.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/grpc_service.h"
#include "server/shard_snapshot.h"

namespace downpour {
namespace {

// A private folder under $TMPDIR (or /tmp), removed with what is in it.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp",
                                    "/downpour-standby-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot make a temporary folder ", tmpl));
    }
    return TempDir(tmpl);
  }
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;  // Only files of ours are in it.
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::Status WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

ReplicaShard StoreReplicaShard(std::function<ParameterStore*()> store) {
  ReplicaShard shard;
  shard.apply = [store](ForwardKind kind, const std::string& request) {
    ParameterStore* s = store();
    if (s == nullptr) return absl::UnavailableError("shard not built yet");
    return ApplyForwardedChange(s, kind, request);
  };
  shard.export_state = [store]() -> absl::StatusOr<JoinState> {
    ParameterStore* s = store();
    if (s == nullptr) return absl::UnavailableError("shard not built yet");
    JoinState state;
    const ShardStats stats = s->Stats();
    state.pushes_applied = stats.pushes_applied;
    state.pushes_duplicate = stats.pushes_duplicate;
    if (!stats.initialized) return state;
    DP_ASSIGN_OR_RETURN(ShardSnapshot snapshot, s->Save());
    DP_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
    DP_ASSIGN_OR_RETURN(std::string path,
                        WriteShardSnapshot(dir.path(), snapshot, {}));
    DP_ASSIGN_OR_RETURN(state.snapshot, ReadAll(path));
    state.declared = true;
    return state;
  };
  shard.import_state = [store](const JoinState& state) -> absl::Status {
    ParameterStore* s = store();
    if (s == nullptr) return absl::UnavailableError("shard not built yet");
    if (state.declared) {
      DP_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
      const std::string path = absl::StrCat(dir.path(), "/join.safetensors");
      DP_RETURN_IF_ERROR(WriteAll(path, state.snapshot));
      DP_ASSIGN_OR_RETURN(ShardSnapshot snapshot, ReadShardSnapshot(path));
      DP_RETURN_IF_ERROR(s->Restore(snapshot));
    }
    s->AdoptPushCounts(state.pushes_applied, state.pushes_duplicate);
    return absl::OkStatus();
  };
  return shard;
}

absl::StatusOr<ReplicaRole> DecideStartRole(
    ReplicaPeer* peer, bool standby_task, absl::Duration give_up,
    const std::function<void(const std::string&)>& log,
    const absl::Notification* stop) {
  const absl::Time deadline = absl::Now() + give_up;
  std::string last_reason;
  auto wait = [&](const std::string& reason) {
    if (reason != last_reason && log) log(reason);
    last_reason = reason;
  };
  while (true) {
    absl::StatusOr<PeerState> p = peer->Hello(absl::Milliseconds(500));
    if (p.ok()) {
      if (p->role == ReplicaRole::kPrimary) return ReplicaRole::kStandby;
      const bool holds_state =
          (p->role == ReplicaRole::kStandby && p->attached) ||
          p->role == ReplicaRole::kFenced;
      if (holds_state) {
        wait(absl::StrCat("waiting for the ", ReplicaRoleName(p->role),
                          " at ", peer->address(), " (epoch ", p->epoch,
                          ") to take over the shard"));
      } else if (!standby_task) {
        return ReplicaRole::kPrimary;
      } else {
        wait(absl::StrCat("waiting for a primary at ", peer->address()));
      }
    } else if (peer->Refuses(absl::Milliseconds(500))) {
      if (!standby_task) return ReplicaRole::kPrimary;
      wait(absl::StrCat("waiting for a primary at ", peer->address()));
    } else {
      wait(absl::StrCat("cannot reach ", peer->address(), " (",
                        p.status().message(), "); waiting"));
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "gave up after ", absl::FormatDuration(give_up), ": ", last_reason));
    }
    if (stop != nullptr &&
        stop->WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      return absl::CancelledError(
          absl::StrCat("stopped by a signal while ", last_reason));
    }
    if (stop == nullptr) absl::SleepFor(absl::Milliseconds(100));
  }
}

std::string PeerCheckpointDir(const std::string& dir, int shard_index) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  const std::string parent =
      slash == std::string::npos ? "" : d.substr(0, slash + 1);
  const std::string base =
      slash == std::string::npos ? d : d.substr(slash + 1);
  if (base == absl::StrCat("shard", shard_index)) {
    return absl::StrCat(parent, "standby", shard_index);
  }
  if (base == absl::StrCat("standby", shard_index)) {
    return absl::StrCat(parent, "shard", shard_index);
  }
  return "";
}

std::string NewerCheckpointDir(
    const std::string& dir, const std::string& peer_dir, int shard_index,
    int num_shards, const std::function<void(const std::string&)>& log) {
  if (peer_dir.empty()) return dir;
  absl::StatusOr<LoadedSnapshot> peer =
      LoadLatestShardSnapshot(peer_dir, shard_index, num_shards);
  if (!peer.ok()) return dir;
  absl::StatusOr<LoadedSnapshot> own =
      LoadLatestShardSnapshot(dir, shard_index, num_shards);
  const bool peer_newer =
      !own.ok() ||
      peer->snapshot.step > own->snapshot.step ||
      (peer->snapshot.step == own->snapshot.step &&
       peer->snapshot.created_unix_ms > own->snapshot.created_unix_ms);
  if (!peer_newer) return dir;
  if (log) {
    log(absl::StrCat("the other process's folder ", peer_dir,
                     " holds the newer snapshot (step ", peer->snapshot.step,
                     own.ok() ? absl::StrCat(" against ", own->snapshot.step)
                              : std::string(),
                     "): restoring from there"));
  }
  return peer_dir;
}

}  // namespace downpour
