// File: server/shared_call_server.h
//
// A shard's thread that answers one worker's calls through the call block
// of the worker's shared region (rpc/shared_calls.h): it sleeps on the
// block's bell, takes each request slot, hands a copy of the request to the
// service's handler and, once the handler answers (at once, or later from
// the thread that completes a sync step), writes the reply into the slot
// and rings the worker. It stops when its owner destroys it, and ends by
// itself once the worker no longer holds the region.
//
//   auto server = std::make_unique<SharedCallServer>(region, ref, shard,
//       [&](CallMethod m, std::string request, SharedCallAnswer answer) {
//         ... answer.finish(status, reply_bytes) exactly once ...
//       });
//
// Thread-safety: the handler runs on the server's thread; an answer may be
// finished from any thread, also after the server is gone (it keeps the
// region mapped).
#ifndef DOWNPOUR_SERVER_SHARED_CALL_SERVER_H_
#define DOWNPOUR_SERVER_SHARED_CALL_SERVER_H_

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "rpc/shared_calls.h"
#include "rpc/shared_memory.h"
#include "rpc/wire.h"

namespace downpour {

// The end of one call: finish writes the reply (or the failure) into its
// slot and rings the worker; abandoned says whether the worker gave up on
// it (a pull then writes no values).
struct SharedCallAnswer {
  std::function<void(const absl::Status&, const std::string& reply)> finish;
  std::function<bool()> abandoned;
};

using SharedCallHandler =
    std::function<void(CallMethod method, std::string request,
                       SharedCallAnswer answer)>;

class SharedCallServer {
 public:
  // Serves `shard`'s block of `region` (which must have one), opened from
  // `ref`; writes this process's id into the block once it is serving.
  SharedCallServer(std::shared_ptr<MappedRegion> region,
                   const wire::SharedRef& ref, int shard,
                   SharedCallHandler handler);
  ~SharedCallServer();
  SharedCallServer(const SharedCallServer&) = delete;
  SharedCallServer& operator=(const SharedCallServer&) = delete;

  // False once the worker let go of the region (or the server stopped).
  bool serving() const { return serving_.load(); }

 private:
  void Run();
  // Hands the request in `slot` (index i, just taken) to the handler.
  void Take(int i, CallSlot* slot);

  const std::shared_ptr<MappedRegion> region_;
  const wire::SharedRef ref_;
  ShardCalls* const block_;  // In *region_.
  const SharedCallHandler handler_;
  // Per slot, whether its answer is still to come: a slot the worker sets
  // back to "request" meanwhile is not taken again (one pending answer per
  // slot, whatever the worker writes). Shared with the answers, which may
  // outlive this server.
  const std::shared_ptr<std::array<std::atomic<bool>, kCallSlots>> busy_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> serving_{true};
  std::thread thread_;  // Started once the members above are set.
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SHARED_CALL_SERVER_H_
