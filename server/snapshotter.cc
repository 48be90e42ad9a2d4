#include "server/snapshotter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace downpour {

absl::Status RestoreLatestSnapshot(
    const std::string& dir, int32_t shard_index, int32_t num_shards,
    ParameterStore* store, const std::function<void(const std::string&)>& log,
    bool start_empty_if_unusable) {
  const absl::Time start = absl::Now();
  absl::StatusOr<LoadedSnapshot> l =
      LoadLatestShardSnapshot(dir, shard_index, num_shards);
  absl::Status s = l.ok() ? store->Restore(l->snapshot) : l.status();
  if (l.ok() && !s.ok()) {
    s = absl::FailedPreconditionError(
        absl::StrCat("cannot restore ", l->path, ": ", s.message()));
  }
  if (absl::IsNotFound(s)) {
    log(absl::StrCat(s.message(), "; starting empty"));
    return absl::OkStatus();
  }
  if (!s.ok()) {
    if (!start_empty_if_unusable) {
      return absl::Status(
          s.code(),
          absl::StrCat(s.message(),
                       " (--start_empty_if_snapshots_unusable starts the "
                       "shard empty instead)"));
    }
    log(absl::StrCat("WARNING: ", s.message(),
                     "; starting empty (--start_empty_if_snapshots_unusable)"));
    return absl::OkStatus();
  }
  for (const std::string& r : l->refused) log(absl::StrCat("refused ", r));
  const absl::Time made = absl::FromUnixMillis(l->snapshot.created_unix_ms);
  log(absl::StrFormat(
      "restored snapshot %s (step %d, written %s, %.1f s ago) in %.0f ms",
      l->path, l->snapshot.step,
      absl::FormatTime("%Y-%m-%d %H:%M:%E3S", made, absl::LocalTimeZone()),
      absl::ToDoubleSeconds(absl::Now() - made),
      absl::ToDoubleMilliseconds(absl::Now() - start)));
  return absl::OkStatus();
}

Snapshotter::Snapshotter(SnapshotterOptions options, ParameterStore* store)
    : options_(std::move(options)), store_(store) {
  if (options_.every > absl::ZeroDuration()) {
    thread_ = std::thread([this] { Loop(); });
  }
}

Snapshotter::~Snapshotter() { Stop(); }

void Snapshotter::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Snapshotter::Loop() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.every)) return;
    }
    absl::Status s = WriteNow();
    if (!s.ok()) options_.log(absl::StrCat("snapshot failed: ", s.message()));
  }
}

absl::Status Snapshotter::WriteNow() {
  absl::MutexLock l(&write_mu_);
  if (!store_->shard_map().ok()) return absl::OkStatus();  // not declared
  const absl::Time start = absl::Now();
  absl::StatusOr<ShardSnapshot> s = store_->Save();
  if (!s.ok()) {
    store_->RecordSnapshotWrite(false, start);
    return s.status();
  }
  const absl::Time copied = absl::Now();
  absl::StatusOr<std::string> path =
      WriteShardSnapshot(options_.dir, *s, options_.write);
  store_->RecordSnapshotWrite(path.ok(),
                              absl::FromUnixMillis(s->created_unix_ms));
  if (!path.ok()) return path.status();
  int64_t floats = 0;
  for (const ChunkSnapshot& c : s->chunks) {
    floats += static_cast<int64_t>(c.values->size() + c.opt_state.size());
  }
  options_.log(absl::StrFormat(
      "snapshot %s written (step %d, %.1f MiB): copy %.1f ms, write %.1f ms",
      *path, s->step, floats * 4.0 / (1 << 20),
      absl::ToDoubleMilliseconds(copied - start),
      absl::ToDoubleMilliseconds(absl::Now() - copied)));
  return absl::OkStatus();
}

}  // namespace downpour
