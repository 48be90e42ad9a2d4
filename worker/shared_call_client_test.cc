// Calls through a shared region's call blocks, both ends real: the worker's
// SharedCallClient and a shard's SharedCallServer (its handler standing in
// for the service) on a region this process made and mapped again through
// /proc, as a shard on the host maps a worker's. Replies now and later,
// failures, deadlines, a shard process that is gone, and the requests the
// client declines.
#include "worker/shared_call_client.h"

#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rpc/grpc_config.h"
#include "server/shared_call_server.h"

namespace downpour {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  std::string out;
  EXPECT_TRUE(ByteBufferBytes(b, &out));
  return out;
}

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s.data(), s.size());
  return grpc::ByteBuffer(&slice, 1);
}

// The end of one call, waited for.
struct Ended {
  absl::Notification done;
  grpc::Status status;
  std::function<void(grpc::Status)> Callback() {
    return [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

// A call to `shard` that the client must take, waited for: its status (an
// INTERNAL one when the client declined it or it did not end in time).
grpc::Status CallAndWait(SharedCallClient& client, int shard, CallMethod method,
                         const std::string& request, grpc::ByteBuffer* reply) {
  Ended e;
  auto done = e.Callback();
  if (!client.Start(shard, method, Bytes(request), reply,
                    absl::Now() + absl::Seconds(10), &done)) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "declined");
  }
  EXPECT_FALSE(done);  // Moved.
  if (!e.Wait()) return grpc::Status(grpc::StatusCode::INTERNAL, "no end");
  return e.status;
}

// Chunks per shard: few enough for any reply to fit a slot.
const std::vector<int64_t> kChunks = {4, 4};

class SharedCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto region = SharedRegion::Create(4096, /*call_shards=*/2);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
    auto mapped = MappedRegion::Open(region_->ref());
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    mapped_ = std::move(*mapped);
    ASSERT_EQ(mapped_->call_shards(), 2);
  }

  // Shard 1's server; its handler answers "<method>:<request>" at once,
  // fails a request "fail", answers "big" with more than a slot holds, and
  // keeps the answer of a request "later" for
  // the test (held_).
  void StartServer() {
    server_ = std::make_unique<SharedCallServer>(
        mapped_, region_->ref(), 1,
        [this](CallMethod m, std::string request, SharedCallAnswer answer) {
          if (request == "fail") {
            answer.finish(absl::NotFoundError("no such chunk"), "");
          } else if (request == "big") {
            answer.finish(absl::OkStatus(), std::string(kCallReplyBytes + 1, 'z'));
          } else if (request == "later") {
            absl::MutexLock l(&mu_);
            held_.push_back(std::move(answer));
          } else {
            answer.finish(absl::OkStatus(),
                          absl::StrCat(static_cast<int>(m), ":", request));
          }
        });
  }

  size_t Held() {
    absl::MutexLock l(&mu_);
    return held_.size();
  }

  std::unique_ptr<SharedRegion> region_;
  std::shared_ptr<MappedRegion> mapped_;
  std::unique_ptr<SharedCallServer> server_;
  absl::Mutex mu_;
  std::vector<SharedCallAnswer> held_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SharedCallsTest, ACallGoesToItsShardAndBack) {
  SharedCallClient client(region_.get(), kChunks);
  EXPECT_FALSE(client.Serves(1));  // No shard serves yet.
  StartServer();
  EXPECT_TRUE(client.Serves(1));
  EXPECT_FALSE(client.Serves(0));
  EXPECT_FALSE(client.Serves(2));
  for (int i = 0; i < 3 * kCallSlots; ++i) {  // Every slot, reused.
    grpc::ByteBuffer reply;
    const std::string request = absl::StrCat("push ", i);
    const grpc::Status s =
        CallAndWait(client, 1, CallMethod::kPushPull, request, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(Flatten(reply), absl::StrCat("2:", request));
  }
  grpc::ByteBuffer reply;
  const grpc::Status failed =
      CallAndWait(client, 1, CallMethod::kPush, "fail", &reply);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(failed.error_message(), "no such chunk");
}

TEST_F(SharedCallsTest, AnAnswerMayComeLaterFromAnotherThread) {
  StartServer();
  SharedCallClient client(region_.get(), kChunks);
  Ended e;
  grpc::ByteBuffer reply;
  auto done = e.Callback();
  ASSERT_TRUE(client.Start(1, CallMethod::kPushPull, Bytes("later"), &reply,
                           absl::Now() + absl::Seconds(10), &done));
  while (Held() == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(e.done.HasBeenNotified());
  SharedCallAnswer answer;
  {
    absl::MutexLock l(&mu_);
    answer = held_[0];
    EXPECT_FALSE(answer.abandoned());
  }
  std::thread([answer] { answer.finish(absl::OkStatus(), "step done"); }).join();
  ASSERT_TRUE(e.Wait());
  ASSERT_TRUE(e.status.ok());
  EXPECT_EQ(Flatten(reply), "step done");
}

TEST_F(SharedCallsTest, ACallPastItsDeadlineIsAbandonedAndItsSlotComesBack) {
  StartServer();
  SharedCallClient client(region_.get(), kChunks);
  // Every slot held by an answer that has not come.
  std::vector<std::unique_ptr<Ended>> ended;
  std::vector<grpc::ByteBuffer> replies(kCallSlots);
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  for (int i = 0; i < kCallSlots; ++i) {
    ended.push_back(std::make_unique<Ended>());
    auto done = ended.back()->Callback();
    ASSERT_TRUE(client.Start(1, CallMethod::kPushPull, Bytes("later"),
                             &replies[i], deadline, &done));
  }
  // All taken by the shard before the deadline.
  while (Held() < static_cast<size_t>(kCallSlots) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(Held(), static_cast<size_t>(kCallSlots));
  // A slot set back to "request" while its answer is pending is not taken
  // twice.
  CallSlot& first = region_->shard_calls(1)->slots[0];
  ASSERT_TRUE(MoveSlot(&first.state, SlotState::kTaken, SlotState::kRequest));
  Ring(&region_->shard_calls(1)->bell);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Held(), static_cast<size_t>(kCallSlots));
  ASSERT_TRUE(MoveSlot(&first.state, SlotState::kRequest, SlotState::kTaken));
  std::function<void(grpc::Status)> done = [](grpc::Status) {};
  grpc::ByteBuffer reply;
  EXPECT_FALSE(client.Start(1, CallMethod::kPushPull, Bytes("x"), &reply,
                            absl::Now() + absl::Seconds(10), &done));
  EXPECT_TRUE(done);  // Declined: left to the caller.
  for (auto& e : ended) {
    ASSERT_TRUE(e->Wait());
    EXPECT_EQ(e->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The shard sees the calls abandoned; its late answers free the slots.
  std::vector<SharedCallAnswer> late;
  {
    absl::MutexLock l(&mu_);
    late = held_;
  }
  ASSERT_EQ(late.size(), static_cast<size_t>(kCallSlots));
  for (const SharedCallAnswer& a : late) {
    EXPECT_TRUE(a.abandoned());
    a.finish(absl::OkStatus(), "too late");
  }
  EXPECT_TRUE(CallAndWait(client, 1, CallMethod::kPushPull, "x", &reply).ok());
  EXPECT_EQ(Flatten(reply), "2:x");
}

TEST_F(SharedCallsTest, CallsToAShardWhoseProcessIsGoneFailAndGoBackToGrpc) {
  // A process that has exited (and been reaped) stands for a killed shard
  // that had served this region, its call taken.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ShardCalls* block = region_->shard_calls(0);
  block->server_pid.store(static_cast<uint32_t>(child));
  SharedCallClient client(region_.get(), kChunks);
  ASSERT_TRUE(client.Serves(0));
  Ended e;
  grpc::ByteBuffer reply;
  auto done = e.Callback();
  ASSERT_TRUE(client.Start(0, CallMethod::kPush, Bytes("p"), &reply,
                           absl::Now() + absl::Seconds(30), &done));
  // Taken, as the shard would have (unless the client saw the shard gone
  // first: then the slot is simply free again).
  const bool taken =
      MoveSlot(&block->slots[0].state, SlotState::kRequest, SlotState::kTaken);
  ASSERT_TRUE(e.Wait());
  EXPECT_EQ(e.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(block->slots[0].state.load(),
            static_cast<uint32_t>(taken ? SlotState::kAbandoned : SlotState::kFree));
  EXPECT_FALSE(client.Serves(0));  // For good, even with a live pid.
  block->server_pid.store(static_cast<uint32_t>(getpid()));
  EXPECT_FALSE(client.Serves(0));
}

TEST_F(SharedCallsTest, TheClientDeclinesWhatASlotCannotHold) {
  StartServer();
  // A shard with so many chunks that a sync reply could outgrow a slot.
  EXPECT_FALSE(SharedCallClient(region_.get(), {4, 100000}).Serves(1));
  SharedCallClient client(region_.get(), kChunks);
  auto done = std::function<void(grpc::Status)>([](grpc::Status) {});
  grpc::ByteBuffer reply;
  EXPECT_FALSE(client.Start(1, CallMethod::kPush,
                            Bytes(std::string(kCallRequestBytes + 1, 'x')),
                            &reply, absl::Now() + absl::Seconds(10), &done));
  EXPECT_FALSE(client.Start(0, CallMethod::kPush, Bytes("x"), &reply,
                            absl::Now() + absl::Seconds(10), &done));
  EXPECT_TRUE(done);
}

TEST_F(SharedCallsTest, TheServerAnswersWhatItCannotServeAndGoesOn) {
  StartServer();
  // Written by hand, as a hostile worker could: an unknown method, and a
  // length past the slot's end (read as the slot's whole request).
  ShardCalls* block = region_->shard_calls(1);
  CallSlot& a = block->slots[3];
  a.method = 77;
  a.request_bytes = 1;
  a.state.store(static_cast<uint32_t>(SlotState::kRequest));
  CallSlot& b = block->slots[4];
  b.method = static_cast<uint32_t>(CallMethod::kPush);
  b.request_bytes = 0xffffffffu;
  b.state.store(static_cast<uint32_t>(SlotState::kRequest));
  Ring(&block->bell);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while ((a.state.load() != static_cast<uint32_t>(SlotState::kDone) ||
          b.state.load() != static_cast<uint32_t>(SlotState::kDone)) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(a.state.load(), static_cast<uint32_t>(SlotState::kDone));
  EXPECT_EQ(a.code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(std::string(a.reply, a.reply_bytes), "shared call: unknown method 77");
  ASSERT_EQ(b.state.load(), static_cast<uint32_t>(SlotState::kDone));
  EXPECT_EQ(b.code, 0);
  EXPECT_EQ(b.reply_bytes, 2 + kCallRequestBytes);  // "1:" + the whole slot.
  a.state.store(static_cast<uint32_t>(SlotState::kFree));
  b.state.store(static_cast<uint32_t>(SlotState::kFree));
  // A reply too large for a slot is refused, not cut.
  SharedCallClient client(region_.get(), kChunks);
  EXPECT_TRUE(server_->serving());
  grpc::ByteBuffer reply;
  EXPECT_EQ(CallAndWait(client, 1, CallMethod::kPush, "big", &reply).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace downpour
