#include "rpc/call_window.h"

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace downpour {
namespace internal {

// What the slots of one RunWindowed share. Lives until the last slot (a
// copy may sit in a finished callback) is gone.
class WindowState : public std::enable_shared_from_this<WindowState> {
 public:
  WindowState(const std::function<void(int, WindowSlot)>* start,
              const std::atomic<bool>* stop, int outstanding)
      : start_(start), stop_(stop), outstanding_(outstanding) {}

  // Queues call i behind lane's running ones.
  void Queue(int lane, int i) {
    absl::MutexLock l(&mu_);
    queued_[lane].push_back(i);
  }

  // Starts the lane's next queued call, or skips all of them once stopped.
  void ReleaseLane(int lane) {
    int next = -1;
    {
      absl::MutexLock l(&mu_);
      auto it = queued_.find(lane);
      if (it == queued_.end() || it->second.empty()) return;
      if (stop_ != nullptr && stop_->load()) {
        for (int i : it->second) skipped_.push_back(i);
        outstanding_ -= static_cast<int>(it->second.size());
        it->second.clear();
        return;
      }
      next = it->second.front();
      it->second.pop_front();
    }
    Start(lane, next);
  }

  void Start(int lane, int i) {
    // The caller's start (and so *start_) outlives every call: RunWindowed
    // waits for all of them to be Done or skipped.
    (*start_)(i, WindowSlot(shared_from_this(), lane));
  }

  void Finish() {
    absl::MutexLock l(&mu_);
    --outstanding_;
  }

  std::vector<int> WaitAll() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &outstanding_));
    return std::move(skipped_);
  }

 private:
  const std::function<void(int, WindowSlot)>* const start_;  // Not owned.
  const std::atomic<bool>* const stop_;                      // Not owned.
  absl::Mutex mu_;
  absl::flat_hash_map<int, std::deque<int>> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<int> skipped_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

void WindowSlot::Release() const {
  if (flags_->released.exchange(true)) return;
  state_->ReleaseLane(lane_);
}

void WindowSlot::Done() const {
  Release();
  if (flags_->done.exchange(true)) return;
  state_->Finish();
}

std::vector<int> RunWindowed(absl::Span<const int> calls,
                             const std::function<int(int)>& lane_of, int window,
                             const std::atomic<bool>* stop,
                             const std::function<void(int, WindowSlot)>& start) {
  auto state = std::make_shared<internal::WindowState>(
      &start, stop, static_cast<int>(calls.size()));
  std::vector<std::pair<int, int>> first;  // (lane, call)
  absl::flat_hash_map<int, int> started;
  for (int i : calls) {
    const int lane = lane_of(i);
    if (window <= 0 || started[lane] < window) {
      ++started[lane];
      first.emplace_back(lane, i);
    } else {
      state->Queue(lane, i);
    }
  }
  // Everything is queued before the first call starts, so a call that
  // completes at once finds its lane's successors.
  for (const auto& [lane, i] : first) state->Start(lane, i);
  return state->WaitAll();
}

}  // namespace downpour
