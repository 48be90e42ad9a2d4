// File: server/snapshotter.h
//
// A shard's checkpoint folder. RestoreLatestSnapshot loads the newest usable
// snapshot of this shard into a fresh store before it serves
// (ParameterServerHostOptions::prepare_store); a Snapshotter thread writes one
// every `every` while the store is declared, and WriteNow writes one on
// SIGTERM. Every write and restore is logged with its path, step, size and
// time.
//
//   auto snap = std::make_unique<Snapshotter>(opts, host->store());
//   ... on SIGTERM: snap->Stop(); snap->WriteNow();
//
// Thread-safety: Stop and WriteNow may be called from any thread; the store
// must outlive the Snapshotter.
#ifndef DOWNPOUR_SERVER_SNAPSHOTTER_H_
#define DOWNPOUR_SERVER_SNAPSHOTTER_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/parameter_store.h"
#include "server/shard_snapshot.h"

namespace downpour {

struct SnapshotterOptions {
  std::string dir;
  absl::Duration every = absl::Seconds(30);  // zero: only WriteNow
  SnapshotWriteOptions write;
  // At start: snapshots of the shard, none usable: start empty rather than
  // fail (RestoreLatestSnapshot).
  bool start_empty_if_unusable = false;
  std::function<void(const std::string&)> log;
};

// Restores `store` (fresh, not declared) from the newest usable snapshot of
// its shard in `dir`, logging which one and from when, and every refused
// newer one with the reason. OK with nothing restored when there is none.
// When there are snapshots of the shard but none can be used (corrupt,
// truncated, values the store refuses), the error names each and why
// (DataLoss, or FailedPrecondition from the store), so that the server
// exits instead of starting empty and soon pruning them; with
// `start_empty_if_unusable` it logs that and starts empty.
absl::Status RestoreLatestSnapshot(const std::string& dir, int32_t shard_index,
                                   int32_t num_shards, ParameterStore* store,
                                   const std::function<void(const std::string&)>& log,
                                   bool start_empty_if_unusable = false);

class Snapshotter {
 public:
  Snapshotter(SnapshotterOptions options, ParameterStore* store);
  ~Snapshotter();  // Stop()
  Snapshotter(const Snapshotter&) = delete;
  Snapshotter& operator=(const Snapshotter&) = delete;

  // Ends the periodic thread (a write in progress finishes first).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes a snapshot now; OK doing nothing when the store is not declared.
  absl::Status WriteNow() ABSL_LOCKS_EXCLUDED(write_mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const SnapshotterOptions options_;
  ParameterStore* const store_;  // Not owned.
  absl::Mutex write_mu_;         // One write at a time.
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SNAPSHOTTER_H_
