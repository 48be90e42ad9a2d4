#include "rpc/fan_out.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "rpc/call_window.h"

namespace downpour {
namespace {

bool IsTransient(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// The first error of a run's on_ok callbacks, set from gRPC's threads.
class FirstError {
 public:
  void Set(absl::Status s) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (status_.ok()) status_ = std::move(s);
  }
  absl::Status Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return status_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

bool ShouldRetry(const RetryPolicy& policy, const grpc::Status& status,
                 int attempt, absl::Duration since_first_failure) {
  if (IsTransient(status)) {
    return attempt < policy.max_attempts ||
           since_first_failure < policy.reconnect_timeout;
  }
  return status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         attempt < policy.max_attempts;
}

absl::Duration RetryBackoff(int attempt, absl::Duration max_backoff) {
  return std::min(absl::Milliseconds(100) * (1 << std::min(attempt, 5)),
                  max_backoff);
}

absl::Status FanOut(const FanOutCalls& calls, const FanOutOptions& options) {
  const int n = calls.count;
  std::vector<int> pending(n);
  for (int i = 0; i < n; ++i) pending[i] = i;
  // Written by call i's completion, read once RunWindowed has returned
  // (which waits for every completion).
  std::vector<grpc::Status> status(n);
  FirstError consume_error;
  // Set once a reply could not be consumed: the run fails, so queued calls
  // are not started (their effect would be for nothing).
  std::atomic<bool> failed{false};
  absl::Time first_failure = absl::InfiniteFuture();
  for (int attempt = 1; !pending.empty(); ++attempt) {
    std::vector<std::unique_ptr<grpc::ClientContext>> ctx(n);
    const std::vector<int> skipped = RunWindowed(
        pending, calls.lane_of, options.window, &failed,
        [&](int i, WindowSlot slot) {
          ctx[i] = std::make_unique<grpc::ClientContext>();
          ctx[i]->set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoMilliseconds(options.timeout));
          ctx[i]->set_wait_for_ready(options.wait_for_ready);
          if (attempt > 1 && calls.reset) calls.reset(i);
          calls.start(i, ctx[i].get(), [&, i, slot](grpc::Status s) {
            // The connection's next call goes out while this reply is read.
            slot.Release();
            if (s.ok() && calls.on_ok) {
              absl::Status c = calls.on_ok(i);
              if (!c.ok()) {
                consume_error.Set(std::move(c));
                failed = true;
              }
            }
            status[i] = std::move(s);
            slot.Done();
          });
        });
    if (absl::Status c = consume_error.Get(); !c.ok()) return c;
    for (int i : skipped) {
      status[i] = grpc::Status(grpc::StatusCode::CANCELLED, "not started");
    }
    std::vector<int> retry;
    const absl::Time now = absl::Now();
    for (int i : pending) {
      if (status[i].ok()) continue;
      first_failure = std::min(first_failure, now);
      if (ShouldRetry(options.retry, status[i], attempt, now - first_failure)) {
        retry.push_back(i);
        continue;
      }
      // As FromGrpcStatus (rpc/rpc_convert.h) converts it; that library
      // carries the parameter protos, which nothing here needs.
      return absl::Status(
          static_cast<absl::StatusCode>(status[i].error_code()),
          absl::StrCat(calls.what, " to ", calls.peer_of(i),
                       attempt > 1 ? absl::StrCat(" after ", attempt,
                                                  " attempts")
                                   : "",
                       ": ", status[i].error_message()));
    }
    if (!retry.empty()) {
      absl::SleepFor(RetryBackoff(attempt, options.retry.max_backoff));
    }
    pending = std::move(retry);
  }
  return absl::OkStatus();
}

}  // namespace downpour
