#include "server/shared_call_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace downpour {
namespace {

// How long the thread sleeps between looks at whether its worker is gone.
constexpr absl::Duration kIdleWait = absl::Milliseconds(200);
constexpr absl::Duration kHeldCheckEvery = absl::Seconds(1);

// Writes the call's end into `slot`, clears its `busy` flag and rings the
// worker.
void Finish(const MappedRegion& region, CallSlot* slot,
            std::atomic<bool>* busy, const absl::Status& s,
            const std::string& reply) {
  absl::Status end = s;
  if (end.ok() && reply.size() > kCallReplyBytes) {
    end = absl::ResourceExhaustedError(absl::StrCat(
        "a reply of ", reply.size(), " bytes does not fit a call slot"));
  }
  const std::string& bytes = end.ok() ? reply : std::string(end.message());
  const size_t n = std::min<size_t>(bytes.size(), kCallReplyBytes);
  std::memcpy(slot->reply, bytes.data(), n);
  slot->reply_bytes = static_cast<uint32_t>(n);
  slot->code = static_cast<int32_t>(end.code());
  // Before the slot can come back with a new request.
  busy->store(false);
  // A call the worker gave up on frees its slot instead.
  if (!MoveSlot(&slot->state, SlotState::kTaken, SlotState::kDone)) {
    MoveSlot(&slot->state, SlotState::kAbandoned, SlotState::kFree);
  }
  Ring(region.client_bell());
}

}  // namespace

SharedCallServer::SharedCallServer(std::shared_ptr<MappedRegion> region,
                                   const wire::SharedRef& ref, int shard,
                                   SharedCallHandler handler)
    : region_(std::move(region)),
      ref_(ref),
      block_(region_->shard_calls(shard)),
      handler_(std::move(handler)),
      busy_(std::make_shared<std::array<std::atomic<bool>, kCallSlots>>()) {
  for (std::atomic<bool>& b : *busy_) b = false;
  // Before the probe that made this server is answered: the worker looks
  // for it right after.
  if (block_ != nullptr) {
    block_->server_pid.store(static_cast<uint32_t>(getpid()),
                             std::memory_order_release);
  }
  thread_ = std::thread([this] { Run(); });
}

SharedCallServer::~SharedCallServer() {
  stop_ = true;
  if (block_ != nullptr) FutexWakeAll(&block_->bell);
  thread_.join();
}

void SharedCallServer::Run() {
  if (block_ == nullptr) {
    serving_ = false;
    return;
  }
  absl::Time checked = absl::Now();
  while (!stop_.load()) {
    const uint32_t seen = block_->bell.load(std::memory_order_acquire);
    bool took = false;
    for (int i = 0; i < kCallSlots; ++i) {
      CallSlot& slot = block_->slots[i];
      if (!(*busy_)[i].load() &&
          slot.state.load(std::memory_order_acquire) ==
              static_cast<uint32_t>(SlotState::kRequest) &&
          MoveSlot(&slot.state, SlotState::kRequest, SlotState::kTaken)) {
        (*busy_)[i] = true;
        Take(i, &slot);
        took = true;
      }
    }
    if (took) continue;
    if (absl::Now() - checked >= kHeldCheckEvery) {
      if (!region_->StillHeld(ref_)) break;
      checked = absl::Now();
    }
    FutexWait(&block_->bell, seen, kIdleWait);
  }
  // The worker stops sending here (it falls back to gRPC), unless another
  // server of this block has written its own id since.
  uint32_t self = static_cast<uint32_t>(getpid());
  block_->server_pid.compare_exchange_strong(self, 0);
  serving_ = false;
}

void SharedCallServer::Take(int i, CallSlot* slot) {
  // Each field read once (the worker may write over the slot while the
  // call runs), the request copied before it is parsed.
  const uint32_t method = __atomic_load_n(&slot->method, __ATOMIC_RELAXED);
  uint32_t n = __atomic_load_n(&slot->request_bytes, __ATOMIC_RELAXED);
  if (n > kCallRequestBytes) n = kCallRequestBytes;
  std::string request(slot->request, n);
  SharedCallAnswer answer;
  std::shared_ptr<MappedRegion> region = region_;
  answer.finish = [region, slot, busy = busy_, i](const absl::Status& s,
                                                  const std::string& reply) {
    Finish(*region, slot, &(*busy)[i], s, reply);
  };
  answer.abandoned = [slot] {
    return slot->state.load(std::memory_order_acquire) ==
           static_cast<uint32_t>(SlotState::kAbandoned);
  };
  if (method != static_cast<uint32_t>(CallMethod::kPush) &&
      method != static_cast<uint32_t>(CallMethod::kPushPull)) {
    answer.finish(absl::InvalidArgumentError(
                      absl::StrCat("shared call: unknown method ", method)),
                  std::string());
    return;
  }
  handler_(static_cast<CallMethod>(method), std::move(request),
           std::move(answer));
}

}  // namespace downpour
