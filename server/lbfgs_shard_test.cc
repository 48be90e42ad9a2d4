#include "server/lbfgs_shard.h"

#include <cmath>
#include <cstdint>
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
      4, /*num_workers=*/3,
      [&](absl::Span<float> out) {
        std::copy(served.begin(), served.end(), out.begin());
        return absl::OkStatus();
      },
      [&](absl::Span<const float> x) {
        published.assign(x.begin(), x.end());
        return absl::OkStatus();
      });
  ASSERT_TRUE(shard.Run({VectorOp::Load(), VectorOp::Open(7)}).ok());
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

// Every vector of the shard, to compare before and after refused requests.
std::vector<std::vector<double>> AllVectors(LbfgsShard& shard, int history) {
  std::vector<std::vector<double>> all;
  for (const VecRef v : {kVecX, kVecG, kVecD, kVecXBase, kVecGTrial}) {
    all.push_back(shard.Get(v));
  }
  for (int k = 0; k < history; ++k) {
    all.push_back(shard.Get(S(k)));
    all.push_back(shard.Get(Y(k)));
  }
  return all;
}

TEST(LbfgsShardTest, RefusesBadRequestsWithoutChangingState) {
  std::vector<float> published;
  LbfgsShard shard(
      2, /*num_workers=*/2,
      [](absl::Span<float> out) {
        out[0] = 1;
        out[1] = 2;
        return absl::OkStatus();
      },
      [&](absl::Span<const float> x) {
        published.assign(x.begin(), x.end());
        return absl::OkStatus();
      });
  // Nothing runs before x is loaded (a restarted shard lost its state).
  EXPECT_EQ(shard.Run({VectorOp::Dot(kVecX, kVecX)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Accumulate(1, 0, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Run({VectorOp::Load(0)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Run({VectorOp::Load(kMaxHistorySlots + 1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(shard.Run({VectorOp::Load(2)}).ok());
  // Nothing is taken before the coordinator opens an evaluation.
  EXPECT_EQ(shard.Accumulate(1, 0, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE(shard.Run({VectorOp::Open(2)}).ok());
  // Some state in every kind of vector: x = (1, 2), d = (2, 4),
  // s0 = (1, 2), y1 = (3, 6).
  ASSERT_TRUE(shard.Run({VectorOp::Copy(kVecD, kVecX),
                         VectorOp::Scale(kVecD, 2),
                         VectorOp::Copy(S(0), kVecX),
                         VectorOp::Copy(Y(1), kVecX),
                         VectorOp::Axpy(Y(1), 1, kVecD)})
                  .ok());
  ASSERT_TRUE(shard.Accumulate(2, 0, std::vector<float>{1, 2}).ok());
  const std::vector<std::vector<double>> before = AllVectors(shard, 2);
  ASSERT_EQ(before[2], (std::vector<double>{2, 4}));

  // Bad pushes.
  EXPECT_EQ(shard.Accumulate(2, 0, std::vector<float>{1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Accumulate(2, 0, std::vector<float>{1, NAN}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Accumulate(2, -1, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Accumulate(2, 2, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  // A late push of an evaluation that is over, and one of an evaluation no
  // coordinator opened (a huge eval cannot wedge the shard).
  EXPECT_EQ(shard.Accumulate(1, 1, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(shard.Accumulate(INT64_MAX, 1, std::vector<float>{1, 2}).code(),
            absl::StatusCode::kAborted);

  // Bad programs, each with a change to x before the bad op: none of it
  // runs.
  const VectorOp touch = VectorOp::Scale(kVecX, 10);
  const auto refused = [&](VectorOp bad) {
    return shard.Run({touch, VectorOp::Axpy(kVecD, 1, kVecX), bad,
                      VectorOp::Publish()})
        .status()
        .code();
  };
  EXPECT_EQ(refused(VectorOp::Dot(S(2), kVecX)),  // beyond --lbfgs_history
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Dot(S(kMaxHistorySlots), kVecX)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Dot(Y(-1), kVecX)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Copy({VecKind::kG, 1}, kVecX)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Copy({static_cast<VecKind>(9), 0}, kVecX)),
            absl::StatusCode::kInvalidArgument);
  VectorOp unknown;
  unknown.kind = static_cast<VectorOp::Kind>(42);
  EXPECT_EQ(refused(unknown), absl::StatusCode::kInvalidArgument);
  for (const double alpha : {double{NAN}, double{INFINITY}, -double{INFINITY}}) {
    EXPECT_EQ(refused(VectorOp::Axpy(kVecX, alpha, kVecD)),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(refused(VectorOp::Scale(kVecD, alpha)),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(refused(VectorOp::Gather(kVecG, alpha, 2, {0})),
              absl::StatusCode::kInvalidArgument);
  }
  // Gathers: a duplicate worker, a worker outside the job, one that pushed
  // nothing, an evaluation that is not the open one, a gather after the
  // accumulations were consumed.
  EXPECT_EQ(refused(VectorOp::Gather(kVecG, 1, 2, {0, 0})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Gather(kVecG, 1, 2, {0, 2})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(VectorOp::Gather(kVecG, 1, 2, {0, 1})),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused(VectorOp::Gather(kVecG, 1, INT64_MAX, {0})),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Run({touch, VectorOp::Gather(kVecG, 1, 2, {0}),
                       VectorOp::Gather(kVecGTrial, 1, 2, {0})})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused(VectorOp::Open(0)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllVectors(shard, 2), before);
  EXPECT_TRUE(published.empty());

  // The accumulation survived all of it.
  ASSERT_TRUE(shard.Run({VectorOp::Gather(kVecG, 1, 2, {0})}).ok());
  EXPECT_EQ(shard.Get(kVecG), (std::vector<double>{1, 2}));
  EXPECT_EQ(shard.Get(kVecD), (std::vector<double>{2, 4}));
  EXPECT_EQ(shard.Get(S(0)), (std::vector<double>{1, 2}));
  EXPECT_EQ(shard.Get(Y(1)), (std::vector<double>{3, 6}));
  // A smaller history on a reload drops the slots beyond it.
  ASSERT_TRUE(shard.Run({VectorOp::Load(1)}).ok());
  EXPECT_EQ(shard.Get(S(0)), (std::vector<double>{1, 2}));
  EXPECT_TRUE(shard.Get(Y(1)).empty());
  EXPECT_EQ(shard.Run({VectorOp::Dot(Y(1), kVecX)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Only the evaluation the coordinator opened takes pushes; opening the next
// one drops what is left of the last.
TEST(LbfgsShardTest, OnlyTheOpenEvaluationTakesPushes) {
  LbfgsShard shard(
      1, /*num_workers=*/2, [](absl::Span<float>) { return absl::OkStatus(); },
      nullptr);
  ASSERT_TRUE(shard.Run({VectorOp::Load(), VectorOp::Open(3)}).ok());
  ASSERT_TRUE(shard.Accumulate(3, 0, std::vector<float>{1}).ok());
  ASSERT_TRUE(shard.Accumulate(3, 0, std::vector<float>{2}).ok());  // adds
  EXPECT_EQ(shard.Accumulate(4, 1, std::vector<float>{5}).code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE(shard.Run({VectorOp::Gather(kVecG, 1, 3, {0})}).ok());
  EXPECT_EQ(shard.Get(kVecG), (std::vector<double>{3}));
  ASSERT_TRUE(shard.Accumulate(3, 1, std::vector<float>{7}).ok());
  ASSERT_TRUE(shard.Run({VectorOp::Open(4)}).ok());
  EXPECT_EQ(shard.Accumulate(3, 1, std::vector<float>{7}).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(shard.Run({VectorOp::Gather(kVecG, 1, 4, {1})}).status().code(),
            absl::StatusCode::kFailedPrecondition);
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
      6, /*num_workers=*/1,
      [store](absl::Span<float> out) {
        const std::vector<float> v = Values(*store);
        std::copy(v.begin(), v.end(), out.begin());
        return absl::OkStatus();
      },
      [store](absl::Span<const float> x) { return store->Overwrite(x); });
  ASSERT_TRUE(shard.Run({VectorOp::Load(), VectorOp::Open(1)}).ok());
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
