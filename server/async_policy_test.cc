// Tests of the async step policy (server/async_policy.h) through ParameterStore's public API.
#include "server/parameter_store.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

using namespace store_test;  // NOLINT: test helpers only.

TEST(AsyncModeTest, StalenessAwareScalingAndDropThreshold) {
  ParameterStoreOptions o;
  o.optimizer.name = "sgd";
  o.optimizer.learning_rate = 1.0f;
  o.staleness_aware = true;
  o.drop_stale_threshold = 2;
  auto store = std::move(*ParameterStore::Create(o));
  std::vector<float> zeros(6, 0.0f);
  ShardMap map = *ComputeShardMap(TinyLayout());
  std::vector<ChunkBytes> init;
  for (const Chunk& c : map.chunks) {
    init.push_back({c.id, 0, zeros.data() + c.flat_offset, c.num_elements * 4});
  }
  ASSERT_TRUE(store->Declare(TinyLayout(), init).ok());
  // Staleness 0, 1, 2 (scales 1, 1, 1/2), then 3 (dropped).
  ASSERT_TRUE(PushConst(*store, 0, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*store, 1, 1, 1.0f, 0).ok());
  ASSERT_TRUE(PushConst(*store, 2, 1, 1.0f, 0).ok());
  EXPECT_EQ(Values(*store), std::vector<float>(6, -2.5f));
  auto r = PushConst(*store, 3, 1, 1.0f, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->dropped);
  EXPECT_EQ(Values(*store), std::vector<float>(6, -2.5f));
  ShardStats s = store->Stats();
  EXPECT_EQ(s.dropped_stale, 1);
  EXPECT_EQ(s.staleness_max, 2);
  EXPECT_EQ(s.staleness_p50, 1);
  EXPECT_EQ(s.staleness_p99, 2);
}

// With num_workers given, async mode refuses ids at or above it; with 0 it
// takes any id >= 0.
TEST(AsyncModeTest, WorkerIdAtOrAboveNumWorkersIsRefused) {
  auto f = NewModeStore(TrainMode::kAsync, 4);
  auto r = PushConst(*f->store, 4, 1, 1.0f, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("worker_id 4"), std::string::npos)
      << r.status();
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, 0.0f));
  ASSERT_TRUE(PushConst(*f->store, 3, 1, 1.0f, 0).ok());
  EXPECT_EQ(f->store->Leave(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(f->store->Leave(3).ok());
  auto any = NewModeStore(TrainMode::kAsync, 0);
  ASSERT_TRUE(PushConst(*any->store, 1000, 1, 1.0f, 0).ok());
}

TEST(PushPartsTest, AsyncPartsAreEachAppliedOnceAndCountAsOnePush) {
  auto f = NewModeStore(TrainMode::kAsync, 1);
  const ShardMap map = *ComputeShardMap(TinyLayout());
  ASSERT_EQ(map.chunks.size(), 2u);
  TinyPart p0 = PartOf(0, 1.0f, 0), p1 = PartOf(1, 1.0f, 0);
  ASSERT_FALSE(f->store->Push(PushId{0, 1, 0, 2}, p0.chunks)->duplicate);
  EXPECT_EQ(f->store->Stats().pushes_applied, 0);  // Half a push so far.
  EXPECT_TRUE(f->store->Push(PushId{0, 1, 0, 2}, p0.chunks)->duplicate);
  ASSERT_FALSE(f->store->Push(PushId{0, 1, 1, 2}, p1.chunks)->duplicate);
  EXPECT_EQ(f->store->Stats().pushes_applied, 1);
  EXPECT_EQ(Values(*f->store), std::vector<float>(6, -1.0f));
  // Parts of an older seq are retries; a part number out of range is refused.
  EXPECT_TRUE(f->store->Push(PushId{0, 0 + 1, 1, 2}, p1.chunks)->duplicate);
  EXPECT_EQ(f->store->Push(PushId{0, 2, 2, 2}, p1.chunks).status().code(),
            absl::StatusCode::kInvalidArgument);
  // num_parts must agree within a seq.
  TinyPart q0 = PartOf(0, 1.0f, 1);
  ASSERT_TRUE(f->store->Push(PushId{0, 3, 0, 2}, q0.chunks).ok());
  EXPECT_EQ(f->store->Push(PushId{0, 3, 1, 3}, p1.chunks).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values(*f->store)[5], -1.0f);  // Chunk 1 untouched by the refusal.
}
}  // namespace
}  // namespace downpour
