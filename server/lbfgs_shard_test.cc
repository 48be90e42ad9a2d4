#include "server/lbfgs_shard.h"

#include <vector>

#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

TEST(LbfgsShardTest, VectorOperationsMatchPlainArithmetic) {
  std::vector<float> served = {1, 2, 3, 4};
  std::vector<float> published;
  LbfgsShard shard(
      4,
      [&](absl::Span<float> out) {
        std::copy(served.begin(), served.end(), out.begin());
        return absl::OkStatus();
      },
      [&](absl::Span<const float> x) {
        published.assign(x.begin(), x.end());
        return absl::OkStatus();
      });
  ASSERT_TRUE(shard.Accumulate(7, 0, std::vector<float>{1, 1, 1, 1}).ok());
  ASSERT_TRUE(shard.Accumulate(7, 2, std::vector<float>{0, 2, 4, 6}).ok());
  ASSERT_TRUE(shard.Accumulate(7, 1, std::vector<float>{9, 9, 9, 9}).ok());
  const std::vector<VectorOp> program = {
      VectorOp::Load(),
      VectorOp::Gather(kVecG, 0.5, 7, {0, 2}),  // g = (0.5, 1.5, 2.5, 3.5)
      VectorOp::Dot(kVecX, kVecG),              // 0.5+3+7.5+14 = 25
      VectorOp::Copy(kVecD, kVecG),
      VectorOp::Scale(kVecD, -2),               // d = -2g
      VectorOp::Axpy(kVecX, 0.5, kVecD),        // x = x - g
      VectorOp::Copy(S(3), kVecX),
      VectorOp::Dot(S(3), S(3)),
      VectorOp::Publish(),
  };
  absl::StatusOr<std::vector<double>> dots = shard.Run(program);
  ASSERT_TRUE(dots.ok()) << dots.status();
  ASSERT_EQ(dots->size(), 2u);
  EXPECT_DOUBLE_EQ((*dots)[0], 25.0);
  // x = (0.5, 0.5, 0.5, 0.5)
  EXPECT_DOUBLE_EQ((*dots)[1], 1.0);
  EXPECT_EQ(published, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  // The accumulations were consumed: a second gather has nothing.
  EXPECT_EQ(shard.Run({VectorOp::Gather(kVecG, 1, 7, {0})}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(LbfgsShardTest, RefusesBadRequestsWithoutChangingState) {
  LbfgsShard shard(
      2, [](absl::Span<float>) { return absl::OkStatus(); }, nullptr);
  // Nothing runs before x is loaded (a restarted shard lost its state).
  EXPECT_EQ(shard.Run({VectorOp::Dot(kVecX, kVecX)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(shard.Run({VectorOp::Load()}).ok());
  EXPECT_EQ(shard.Accumulate(1, 0, std::vector<float>{1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Accumulate(1, 0, std::vector<float>{1, NAN}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(shard.Accumulate(2, 0, std::vector<float>{1, 2}).ok());
  // A late push of an evaluation that is over.
  EXPECT_EQ(shard.Accumulate(1, 1, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Run({VectorOp::Dot(S(kMaxHistorySlots), kVecX)})
                .status().code(),
            absl::StatusCode::kInvalidArgument);
  VectorOp bad;
  bad.kind = static_cast<VectorOp::Kind>(42);
  EXPECT_EQ(shard.Run({bad}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Run({VectorOp::Publish()}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A gather of a worker that pushed nothing; the others' stay.
  EXPECT_EQ(shard.Run({VectorOp::Gather(kVecG, 1, 2, {0, 1})}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(shard.Run({VectorOp::Gather(kVecG, 1, 2, {0})}).ok());
  EXPECT_EQ(shard.Get(kVecG), (std::vector<double>{1, 2}));
}

}  // namespace
}  // namespace downpour

namespace downpour {
namespace {

using store_test::ModeFixture;
using store_test::NewModeStore;
using store_test::Values;

// The shard's x round-trips through a real store in sandblaster mode:
// load reads the declared values, publish overwrites them (versions bumped,
// what pulls serve), and a bad overwrite changes nothing.
TEST(LbfgsShardTest, LoadsFromAndPublishesIntoTheStore) {
  std::unique_ptr<ModeFixture> f = NewModeStore(TrainMode::kSandblaster, 2);
  ParameterStore* store = f->store.get();
  LbfgsShard shard(
      6,
      [store](absl::Span<float> out) {
        const std::vector<float> v = Values(*store);
        std::copy(v.begin(), v.end(), out.begin());
        return absl::OkStatus();
      },
      [store](absl::Span<const float> x) { return store->Overwrite(x); });
  ASSERT_TRUE(shard.Run({VectorOp::Load()}).ok());
  ASSERT_TRUE(shard.Accumulate(1, 0, std::vector<float>{1, 2, 3, 4, 5, 6}).ok());
  ASSERT_TRUE(shard.Run({VectorOp::Gather(kVecG, 1, 1, {0}),
                         VectorOp::Axpy(kVecX, -0.5, kVecG),
                         VectorOp::Publish()})
                  .ok());
  int64_t version = 0;
  EXPECT_EQ(Values(*store, &version),
            (std::vector<float>{-0.5f, -1, -1.5f, -2, -2.5f, -3}));
  EXPECT_EQ(version, 1);
  const std::vector<float> bad = {1, 2, NAN, 4, 5, 6};
  EXPECT_EQ(store->Overwrite(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Overwrite(std::vector<float>{1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values(*store)[0], -0.5f);
}

}  // namespace
}  // namespace downpour
