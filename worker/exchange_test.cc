#include "worker/exchange.h"

#include <cmath>
#include <memory>
#include <vector>

#include "common/host_allocator_test_util.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "worker/data/data.h"
#include "worker/local_ps_client.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"
#include "worker/replica_group.h"
#include "worker/worker_test_util.h"

namespace downpour {
namespace {

// One shard with SGD, one worker, one replica.
struct Fixture {
  std::unique_ptr<Backend> backend = NewOpenblasBackend(1);
  Dataset data = TinyDataset(32);
  std::unique_ptr<Model> model;
  std::unique_ptr<Batcher> batcher;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<ParameterClient> client;
  std::unique_ptr<ReplicaGroup> group;

  explicit Fixture(TrainMode mode = TrainMode::kAsync) {
    model = std::move(*BuildModel("fashion_cnn", backend.get(), 8));
    BatcherOptions bo;
    bo.batch_size = 8;
    batcher = std::move(*Batcher::Create(&data, bo));
    ParameterStoreOptions so;
    so.optimizer.name = "sgd";
    so.optimizer.learning_rate = 0.1f;
    so.mode = mode;
    so.num_workers = 1;
    store = std::move(*ParameterStore::Create(so));
    client = NewLocalParameterClient({store.get()}, 0);
    ModelLayout layout;
    layout.tensors = model->param_specs();
    layout.num_shards = 1;
    layout.max_chunk_bytes = 1 << 20;
    EXPECT_TRUE(client->Declare(layout, model->InitialParameters(1)).ok());
    const Replica r{model.get(), batcher.get()};
    group = std::move(
        *ReplicaGroup::Create(absl::MakeConstSpan(&r, 1),
                              DefaultHostAllocator(), 0));
  }

  std::vector<float> ModelParams() {
    std::vector<float> p(model->num_parameters());
    EXPECT_TRUE(model->GetParameters(absl::MakeSpan(p)).ok());
    return p;
  }
  std::vector<float> ServerParams() {
    std::vector<float> p(model->num_parameters());
    std::vector<int64_t> v;
    EXPECT_TRUE(client->Pull(absl::MakeSpan(p), &v).ok());
    return p;
  }
  int64_t PushesApplied() {
    auto stats = client->Stats();
    EXPECT_TRUE(stats.ok());
    return stats.ok() ? (*stats)[0].pushes_applied : -1;
  }
  void Step() {
    ASSERT_TRUE(group->NextBatches());
    ASSERT_TRUE(group->Compute(0).ok());
  }
};

TEST(ExchangeTest, RejectsBadOptionsAndFailedAllocation) {
  Fixture f;
  auto refused = [&f](const ExchangeOptions& bad) {
    return Exchange::Create(bad, f.client.get(), f.group.get(),
                            DefaultHostAllocator())
               .status()
               .code() == absl::StatusCode::kInvalidArgument;
  };
  ExchangeOptions o;
  o.n_fetch = 0;
  EXPECT_TRUE(refused(o));
  for (double fraction : {-0.1, 1.5, std::nan("")}) {
    ExchangeOptions bad;
    bad.fresh_wait_fraction = fraction;
    EXPECT_TRUE(refused(bad)) << fraction;
  }
  for (int64_t bytes : {int64_t{0}, int64_t{-1}}) {
    ExchangeOptions bad;
    bad.bucket_bytes = bytes;
    EXPECT_TRUE(refused(bad)) << bytes;
  }
  FailingHostAllocator failing;
  for (bool overlap : {false, true}) {
    ExchangeOptions ok;
    ok.overlap = overlap;
    EXPECT_EQ(
        Exchange::Create(ok, f.client.get(), f.group.get(), &failing)
            .status()
            .code(),
        absl::StatusCode::kResourceExhausted);
  }
}

TEST(ExchangeTest, SynchronousPushesThenFetchesTheServersParameters) {
  Fixture f;
  ExchangeOptions o;
  auto ex = Exchange::Create(o, f.client.get(), f.group.get(),
                             DefaultHostAllocator());
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->PullFirst().ok());
  EXPECT_EQ(f.ModelParams(), f.ServerParams());
  f.Step();
  ASSERT_TRUE((*ex)->Push(1).ok());
  EXPECT_EQ((*ex)->pushes(), 1);
  EXPECT_EQ(f.PushesApplied(), 1);
  EXPECT_EQ(f.group->accrued_steps(), 0);
  ASSERT_TRUE((*ex)->Fetch().ok());
  EXPECT_EQ(f.ModelParams(), f.ServerParams());
  // Nothing accrued since: Finish pushes nothing.
  ASSERT_TRUE((*ex)->Finish().ok());
  EXPECT_EQ((*ex)->pushes(), 1);
}

TEST(ExchangeTest, OverlappedPushPullsInTheBackgroundAndFinishFlushes) {
  Fixture f(TrainMode::kSync);
  ExchangeOptions o;
  o.overlap = true;
  o.wait_free = false;
  o.mode = TrainMode::kSync;  // Fetch waits for the step's parameters.
  auto ex = Exchange::Create(o, f.client.get(), f.group.get(),
                             DefaultHostAllocator());
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->PullFirst().ok());
  const std::vector<float> first = f.ModelParams();
  f.Step();
  ASSERT_TRUE((*ex)->Push(1).ok());
  EXPECT_EQ((*ex)->pushes(), 1);
  ASSERT_TRUE((*ex)->Fetch().ok());  // Waits for the push and the pull.
  EXPECT_EQ(f.PushesApplied(), 1);
  EXPECT_NE(f.ModelParams(), first);
  EXPECT_EQ(f.ModelParams(), f.ServerParams());
  // A step accrued and not pushed: Finish pushes it.
  f.Step();
  ASSERT_TRUE((*ex)->Finish().ok());
  EXPECT_EQ((*ex)->pushes(), 2);
  EXPECT_EQ(f.PushesApplied(), 2);
}

}  // namespace
}  // namespace downpour
