// File: rpc/shared_calls.h
//
// Calls between a worker and the shards on its host through the worker's
// shared region (rpc/shared_memory.h) instead of gRPC: for each shard a
// block of call slots after the reply area, and futex doorbells, so that a
// push or push-pull costs two wake-ups (the shard's serving thread, then the
// worker's) and no socket. The request and reply bytes in a slot are
// exactly the gRPC messages' (rpc/wire.h), so the shard runs the same
// checks and the same store calls on them; the payloads stay in the
// region's areas.
//
//   [header ... client bell at kClientBellOffset][push area][reply area]
//   [shard 0: ShardCalls][shard 1: ShardCalls] ...
//
// A slot goes round
//
//   free -> claimed -> request -> taken -> done -> free
//
// the worker moving it from free to request (writing the request while it
// holds it claimed) and from done back to free, the shard's thread from
// request to taken (then reading a copy of the request) and, when the
// store's answer is ready, to done (after writing the reply), ringing the
// region's client bell. A worker that gives up on a call moves it from
// request back to free, or from taken to abandoned, which the shard turns
// into free instead of done. Each shard's block has its own bell, rung by
// the worker after each request, and the shard's process id, written by
// its serving thread when it starts: the worker takes a shard's slots only
// once that is there, and fails its calls to a shard whose process is gone.
//
// The worker may write anything into its region; a shard reads only
// bounded lengths, copies a request before parsing it, and treats a slot
// whose state moves under it as the worker's own loss.
//
// Thread-safety: the slot protocol is for one worker process (any of its
// threads claiming slots by compare-and-swap) and one serving thread per
// shard, plus whichever shard thread completes a call.
#ifndef DOWNPOUR_RPC_SHARED_CALLS_H_
#define DOWNPOUR_RPC_SHARED_CALLS_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace downpour {

inline constexpr int kCallSlots = 16;
inline constexpr uint32_t kCallRequestBytes = 16320;
inline constexpr uint32_t kCallReplyBytes = 16384;
// Where the region's client bell sits in its header (its own cache line).
inline constexpr uint64_t kClientBellOffset = 64;

enum class SlotState : uint32_t {
  kFree = 0,
  kClaimed = 1,
  kRequest = 2,
  kTaken = 3,
  kDone = 4,
  kAbandoned = 5,
};

// What a slot's request is; the values are part of the region's layout.
enum class CallMethod : uint32_t {
  kPush = 1,      // PushRequest bytes; the reply is PushResponse bytes.
  kPushPull = 2,  // PushRequest bytes; the reply is PullResponse bytes.
};

struct CallSlot {
  std::atomic<uint32_t> state;
  uint32_t method;         // CallMethod.
  uint32_t request_bytes;  // <= kCallRequestBytes.
  uint32_t reply_bytes;    // <= kCallReplyBytes.
  int32_t code;            // absl::StatusCode; a failure's reply is its message.
  uint32_t reserved[11];
  char request[kCallRequestBytes];
  char reply[kCallReplyBytes];
};

struct ShardCalls {
  std::atomic<uint32_t> bell;        // Rung by the worker after each request.
  std::atomic<uint32_t> server_pid;  // Written by the shard's serving thread.
  uint32_t reserved[14];
  CallSlot slots[kCallSlots];
};

static_assert(sizeof(CallSlot) % 64 == 0, "slots on cache lines");
static_assert(sizeof(ShardCalls) % 64 == 0, "blocks on cache lines");
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "a futex word between processes");

// Whether the replies of a shard holding `chunks` chunks fit a slot: a
// PushPull's reply names each pushed chunk (a sync one, every chunk of the
// shard) in a few bytes, its values being in the region.
inline bool CallRepliesFit(int64_t chunks) {
  return 64 + 32 * chunks <= static_cast<int64_t>(kCallReplyBytes);
}

// Bytes of the call blocks for `shards` shards.
inline uint64_t CallAreaBytes(int shards) {
  return static_cast<uint64_t>(shards) * sizeof(ShardCalls);
}

// Atomically moves *w from `from` to `to`; false when it held another state.
bool MoveSlot(std::atomic<uint32_t>* w, SlotState from, SlotState to);

// Wakes every thread, in any process, waiting on `word` (a futex on shared
// memory).
void FutexWakeAll(std::atomic<uint32_t>* word);
// Waits while *word == seen, at most `timeout`; may return early (a
// wake-up, a signal, or *word having changed).
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen,
               absl::Duration timeout);
// Increments `bell` and wakes its waiters.
void Ring(std::atomic<uint32_t>* bell);

// Whether process `pid` exists on this host and is not a zombie.
bool ProcessAlive(uint32_t pid);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_SHARED_CALLS_H_
