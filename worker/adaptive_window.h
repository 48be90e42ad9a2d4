// File: worker/adaptive_window.h
//
// Sizes the calls in flight per connection from what the connection shows:
// over loopback one call in flight keeps the bytes in the CPU cache and is
// fastest (README, Transport), but over a link with a larger
// bandwidth-delay product one call leaves the link idle for a round trip
// per part. The gRPC client (worker/shard_transport.h) reports every
// whole-model exchange (bytes moved, time taken); this hill-climber starts
// at one call and now and then tries twice the window for two exchanges,
// keeping it only when both were at least `gain` faster than the current
// window's average throughput. Failed probes are retried exponentially less
// often, so on loopback it stays at 1 and costs a probe round now and then.
//
//   AdaptiveWindow w(AdaptiveWindowOptions{});
//   fan_out_options.window = w.window();  // rpc/fan_out.h
//   w.OnRound(bytes_both_ways, elapsed);
//
// Thread-safe.
#ifndef DOWNPOUR_WORKER_ADAPTIVE_WINDOW_H_
#define DOWNPOUR_WORKER_ADAPTIVE_WINDOW_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

struct AdaptiveWindowOptions {
  int max_window = 16;     // Calls in flight per connection, at most.
  int probe_every = 8;     // Rounds between probes at first.
  int max_probe_every = 1024;
  double gain = 1.10;      // A probe must be this much faster to be kept.
};

class AdaptiveWindow {
 public:
  explicit AdaptiveWindow(const AdaptiveWindowOptions& options);

  // Calls in flight per connection for the next round (>= 1).
  int window() const ABSL_LOCKS_EXCLUDED(mu_);
  // One round at window(): `bytes` moved (both ways) in `elapsed`.
  void OnRound(int64_t bytes, absl::Duration elapsed) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const AdaptiveWindowOptions options_;
  mutable absl::Mutex mu_;
  int current_ ABSL_GUARDED_BY(mu_) = 1;
  double current_rate_ ABSL_GUARDED_BY(mu_) = 0;  // EWMA, bytes/s.
  int rounds_since_probe_ ABSL_GUARDED_BY(mu_) = 0;
  int probe_every_ ABSL_GUARDED_BY(mu_);
  int probe_rounds_ ABSL_GUARDED_BY(mu_) = 0;     // > 0: probing.
  double probe_min_rate_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_ADAPTIVE_WINDOW_H_
