// File: rpc/call_window.h
//
// Runs a batch of asynchronous calls with at most `window` of them in flight
// per lane (a lane is one connection) at a time. The rest wait in their
// lane's queue; each starts, on the thread that completed the call before
// it, as soon as that call releases its slot. rpc/fan_out.h runs its calls
// through it, so that what a connection has in flight stays bounded (small
// enough, say, for the bytes to stay in the CPU cache).
//
//   std::atomic<bool> stop{false};
//   std::vector<int> skipped = RunWindowed(
//       ids, [&](int i) { return lane[i]; }, /*window=*/1, &stop,
//       [&](int i, WindowSlot slot) {
//         StartRpc(i, [&, i, slot](Status s) {
//           slot.Release();  // The lane's next call starts now.
//           ...read the reply...
//           slot.Done();     // RunWindowed returns after every call's Done.
//         });
//       });
#ifndef DOWNPOUR_RPC_CALL_WINDOW_H_
#define DOWNPOUR_RPC_CALL_WINDOW_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace downpour {

namespace internal {
class WindowState;
}  // namespace internal

// A started call's place in its lane: a handle that copies share (so it
// fits in a std::function). Done must be called once per call, from any
// thread; Release before it is optional. Both are idempotent.
class WindowSlot {
 public:
  // Frees the slot: the lane's next queued call starts now, on this thread
  // (or is skipped, once *stop is true).
  void Release() const;
  // Releases the slot if not yet done, and counts the call as finished.
  void Done() const;

 private:
  friend class internal::WindowState;
  struct Flags {
    std::atomic<bool> released{false};
    std::atomic<bool> done{false};
  };
  WindowSlot(std::shared_ptr<internal::WindowState> state, int lane)
      : state_(std::move(state)), lane_(lane), flags_(std::make_shared<Flags>()) {}

  std::shared_ptr<internal::WindowState> state_;
  int lane_ = 0;
  std::shared_ptr<Flags> flags_;
};

// Starts `start(i, slot)` for every i in `calls`, in order within each lane,
// with at most `window` in flight per lane_of(i) (0: no limit), and returns
// once every started call's slot is Done. Queued calls are not started once
// `*stop` is true (stop may be null); they are returned, in no particular
// order. `start` must not block; it may call Release and Done itself.
std::vector<int> RunWindowed(absl::Span<const int> calls,
                             const std::function<int(int)>& lane_of, int window,
                             const std::atomic<bool>* stop,
                             const std::function<void(int, WindowSlot)>& start);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_CALL_WINDOW_H_
