#include "worker/replica_group.h"

#include <cstring>
#include <memory>
#include <vector>

#include "common/host_allocator_test_util.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"
#include "worker/worker_test_util.h"

namespace downpour {
namespace {

struct Fixture {
  // A backend is used by one thread at a time: one per replica.
  std::vector<std::unique_ptr<Backend>> backends;
  Dataset data = TinyDataset(16);
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<Batcher>> batchers;
  std::vector<Replica> replicas;

  // `count` replicas over the same batches (same seed, one worker each).
  explicit Fixture(int count, int epochs = 1) {
    for (int r = 0; r < count; ++r) {
      backends.push_back(NewOpenblasBackend(1));
      models.push_back(
          std::move(*BuildModel("fashion_cnn", backends.back().get(), 8)));
      BatcherOptions o;
      o.batch_size = 8;
      o.epochs = epochs;
      batchers.push_back(std::move(*Batcher::Create(&data, o)));
      replicas.push_back({models.back().get(), batchers.back().get()});
    }
  }
};

TEST(ReplicaGroupTest, RejectsBadReplicas) {
  Fixture f(2);
  EXPECT_EQ(ReplicaGroup::Create({}, DefaultHostAllocator(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<Replica> bad = f.replicas;
  bad[1].batcher = nullptr;
  EXPECT_EQ(
      ReplicaGroup::Create(bad, DefaultHostAllocator(), 0).status().code(),
      absl::StatusCode::kInvalidArgument);
  bad = f.replicas;
  bad[0].model = nullptr;
  EXPECT_EQ(
      ReplicaGroup::Create(bad, DefaultHostAllocator(), 0).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ReplicaGroupTest, FailedHostAllocationIsAStatus) {
  Fixture f(2);
  FailingHostAllocator failing;
  EXPECT_EQ(ReplicaGroup::Create(f.replicas, &failing, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ReplicaGroupTest, MeanOfIdenticalReplicasIsOneReplicasGradient) {
  Fixture one(1), two(2);
  auto g1 = ReplicaGroup::Create(one.replicas, DefaultHostAllocator(), 0);
  auto g2 = ReplicaGroup::Create(two.replicas, DefaultHostAllocator(), 0);
  ASSERT_TRUE(g1.ok() && g2.ok());
  const int64_t n = (*g1)->num_parameters();
  const std::vector<float> init = one.models[0]->InitialParameters(3);
  ASSERT_TRUE((*g1)->SetParameters(init).ok());
  ASSERT_TRUE((*g2)->SetParameters(init).ok());
  ASSERT_TRUE((*g1)->NextBatches());
  ASSERT_TRUE((*g2)->NextBatches());
  auto s1 = (*g1)->Compute(0);
  auto s2 = (*g2)->Compute(0);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->examples, 8);
  EXPECT_EQ(s2->examples, 16);
  EXPECT_FLOAT_EQ(s1->loss, s2->loss);
  EXPECT_EQ((*g2)->accrued_steps(), 1);
  std::vector<float> a(n), b(n);
  ASSERT_TRUE((*g1)->TakeMeanGradient(a.data()).ok());
  ASSERT_TRUE((*g2)->TakeMeanGradient(b.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
  EXPECT_EQ((*g2)->accrued_steps(), 0);
  // The accruals were zeroed.
  ASSERT_TRUE((*g2)->TakeMeanGradient(b.data()).ok());
  for (float v : b) ASSERT_EQ(v, 0.0f);
}

TEST(ReplicaGroupTest, GradientsAccrueAndLocalStepMovesParameters) {
  Fixture f(1);
  auto g = ReplicaGroup::Create(f.replicas, DefaultHostAllocator(), 0.1f);
  ASSERT_TRUE(g.ok());
  const std::vector<float> init = f.models[0]->InitialParameters(3);
  ASSERT_TRUE((*g)->SetParameters(init).ok());
  ASSERT_TRUE((*g)->NextBatches());
  ASSERT_TRUE((*g)->Compute(0).ok());
  ASSERT_TRUE((*g)->NextBatches());
  ASSERT_TRUE((*g)->Compute(1).ok());
  EXPECT_EQ((*g)->accrued_steps(), 2);
  std::vector<float> now(init.size());
  ASSERT_TRUE(f.models[0]->GetParameters(absl::MakeSpan(now)).ok());
  EXPECT_NE(now, init);
  // 16 examples, batches of 8, one epoch: the input is exhausted.
  EXPECT_FALSE((*g)->NextBatches());
}

}  // namespace
}  // namespace downpour
