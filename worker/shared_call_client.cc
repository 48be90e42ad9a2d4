#include "worker/shared_call_client.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "grpcpp/support/slice.h"

namespace downpour {
namespace {

// How often, at most, the thread looks at whether a shard with calls under
// way is still there.
constexpr absl::Duration kLivenessEvery = absl::Milliseconds(50);

}  // namespace

SharedCallClient::SharedCallClient(SharedRegion* region,
                                   const std::vector<int64_t>& shard_chunks)
    : region_(region),
      shards_(region->call_shards()),
      off_(static_cast<size_t>(region->call_shards())) {
  for (int s = 0; s < shards_; ++s) {
    off_[s] = s >= static_cast<int>(shard_chunks.size()) ||
              !CallRepliesFit(shard_chunks[s]);
  }
  thread_ = std::thread([this] { Run(); });
}

SharedCallClient::~SharedCallClient() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  FutexWakeAll(region_->client_bell());
  thread_.join();
}

bool SharedCallClient::Serves(int shard) const {
  if (shard < 0 || shard >= shards_ || off_[shard].load()) return false;
  return region_->shard_calls(shard)->server_pid.load(
             std::memory_order_acquire) != 0;
}

bool SharedCallClient::Start(int shard, CallMethod method,
                             const grpc::ByteBuffer& request,
                             grpc::ByteBuffer* response, absl::Time deadline,
                             std::function<void(grpc::Status)>* done) {
  if (!Serves(shard) || request.Length() > kCallRequestBytes) return false;
  std::vector<grpc::Slice> slices;
  if (!request.Dump(&slices).ok()) return false;
  ShardCalls* block = region_->shard_calls(shard);
  int slot = -1;
  for (int i = 0; i < kCallSlots && slot < 0; ++i) {
    if (MoveSlot(&block->slots[i].state, SlotState::kFree, SlotState::kClaimed)) {
      slot = i;
    }
  }
  if (slot < 0) return false;
  CallSlot& s = block->slots[slot];
  size_t at = 0;
  for (const grpc::Slice& piece : slices) {
    std::memcpy(s.request + at, piece.begin(), piece.size());
    at += piece.size();
  }
  s.method = static_cast<uint32_t>(method);
  s.request_bytes = static_cast<uint32_t>(at);
  {
    absl::MutexLock l(&mu_);
    if (stop_) {
      s.state.store(static_cast<uint32_t>(SlotState::kFree));
      return false;
    }
    pending_.push_back(Pending{shard, slot, response, deadline, std::move(*done)});
  }
  s.state.store(static_cast<uint32_t>(SlotState::kRequest),
                std::memory_order_release);
  Ring(&block->bell);
  return true;
}

void SharedCallClient::Run() {
  std::atomic<uint32_t>* bell = region_->client_bell();
  absl::Time checked = absl::Now();
  std::vector<bool> waiting(static_cast<size_t>(shards_));
  std::vector<bool> gone(static_cast<size_t>(shards_));
  for (;;) {
    const uint32_t seen = bell->load(std::memory_order_acquire);
    std::vector<std::pair<std::function<void(grpc::Status)>, grpc::Status>> ended;
    bool stop;
    // Every kLivenessEvery, whether the shards with calls under way are
    // still there: read from /proc outside the lock.
    const bool check = absl::Now() - checked >= kLivenessEvery;
    if (check) {
      checked = absl::Now();
      {
        absl::MutexLock l(&mu_);
        waiting.assign(waiting.size(), false);
        for (const Pending& p : pending_) waiting[p.shard] = true;
      }
      for (int s = 0; s < shards_; ++s) {
        gone[s] = waiting[s] &&
                  !ProcessAlive(region_->shard_calls(s)->server_pid.load(
                      std::memory_order_acquire));
      }
    }
    {
      absl::MutexLock l(&mu_);
      stop = stop_;
      const absl::Time now = absl::Now();
      for (size_t i = 0; i < pending_.size();) {
        Pending& p = pending_[i];
        CallSlot* slot = SlotOf(p);
        grpc::Status status;
        bool over = false;
        if (slot->state.load(std::memory_order_acquire) ==
            static_cast<uint32_t>(SlotState::kDone)) {
          const uint32_t n = std::min(slot->reply_bytes, kCallReplyBytes);
          if (slot->code == 0) {
            grpc::Slice bytes(slot->reply, n);
            *p.response = grpc::ByteBuffer(&bytes, 1);
          } else {
            status = grpc::Status(static_cast<grpc::StatusCode>(slot->code),
                                  std::string(slot->reply, n));
          }
          MoveSlot(&slot->state, SlotState::kDone, SlotState::kFree);
          over = true;
        } else if (stop || now >= p.deadline || (check && gone[p.shard])) {
          // Given up: a slot not taken yet is free again; a taken one is the
          // shard's to free (or lost with its process).
          if (MoveSlot(&slot->state, SlotState::kRequest, SlotState::kFree) ||
              MoveSlot(&slot->state, SlotState::kTaken, SlotState::kAbandoned)) {
            if (stop) {
              status = grpc::Status(grpc::StatusCode::CANCELLED,
                                    "shared call: the client stopped");
            } else if (now >= p.deadline) {
              status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                    "shared call: deadline exceeded");
            } else {
              off_[p.shard] = true;
              status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    "shared call: the shard's process is gone");
            }
            over = true;
          }
        }
        if (!over) {
          ++i;
          continue;
        }
        ended.emplace_back(std::move(p.done), status);
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      }
      if (stop && pending_.empty() && ended.empty()) return;
    }
    for (auto& [done, status] : ended) done(status);
    if (!ended.empty()) continue;
    FutexWait(bell, seen, kLivenessEvery);
  }
}

}  // namespace downpour
