// File: worker/shared_call_client.h
//
// A worker's side of calls through its shared region (rpc/shared_calls.h):
// a push or push-pull to a shard on its host is written into one of the
// shard's call slots and the shard's bell rung, instead of going to gRPC;
// one thread of this client sleeps on the region's client bell and
// completes each call (its reply bytes into the call's ByteBuffer, then its
// `done`) as the shards finish them. Requests and replies are the gRPC
// methods' bytes, so the parameter client reads them as it reads gRPC's.
//
// A call fails UNAVAILABLE, and its shard's calls go back to gRPC for good,
// when the shard's process is gone (a restarted shard is found again over
// gRPC); past its deadline it fails DEADLINE_EXCEEDED. Start declines
// (returns false, nothing started) when the shard does not serve calls, no
// slot is free or the request does not fit one: the caller sends it by gRPC.
//
//   SharedCallClient calls(region.get(), chunks_per_shard);
//   if (!calls.Start(shard, CallMethod::kPushPull, req, &resp, deadline,
//                    &done)) {
//     stub->UnaryCall(..., std::move(done));
//   }
//
// Thread-safety: thread-safe; `done` runs on the client's thread.
// Ownership: the region is borrowed and must outlive the client.
#ifndef DOWNPOUR_WORKER_SHARED_CALL_CLIENT_H_
#define DOWNPOUR_WORKER_SHARED_CALL_CLIENT_H_

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "rpc/shared_calls.h"
#include "rpc/shared_memory.h"

namespace downpour {

class SharedCallClient {
 public:
  // `shard_chunks[s]`: shard s's chunk count; a shard whose replies could
  // outgrow a slot (CallRepliesFit) is not called here.
  SharedCallClient(SharedRegion* region, const std::vector<int64_t>& shard_chunks);
  // Fails the calls still under way (CANCELLED) and stops the thread.
  ~SharedCallClient();
  SharedCallClient(const SharedCallClient&) = delete;
  SharedCallClient& operator=(const SharedCallClient&) = delete;

  // Whether `shard`'s block has a serving shard process now (and its replies
  // fit a slot).
  bool Serves(int shard) const;
  // Starts a call to `shard`, `response` receiving the reply; on true,
  // *done was moved and will be called once. False leaves *done alone.
  bool Start(int shard, CallMethod method, const grpc::ByteBuffer& request,
             grpc::ByteBuffer* response, absl::Time deadline,
             std::function<void(grpc::Status)>* done);

 private:
  struct Pending {
    int shard = -1;
    int slot = -1;
    grpc::ByteBuffer* response = nullptr;
    absl::Time deadline;
    std::function<void(grpc::Status)> done;
  };
  void Run();
  CallSlot* SlotOf(const Pending& p) const {
    return &region_->shard_calls(p.shard)->slots[p.slot];
  }

  SharedRegion* const region_;  // Not owned.
  const int shards_;
  // Shards whose calls go by gRPC: their replies could outgrow a slot, or
  // their process was gone.
  std::vector<std::atomic<bool>> off_;
  absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: started once the members above are set.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SHARED_CALL_CLIENT_H_
