#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host_allocator_test_util.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "worker/data_position.h"
#include "worker/local_ps_client.h"
#include "worker/nn/backend.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

// A separable 28x28 problem: class k lights a 4x4 patch at a class-specific
// place, plus noise. Real data is used by the integration tests.
Dataset Synthetic(int n, uint64_t seed) {
  Dataset d;
  d.size = n;
  d.height = d.width = 28;
  d.images.assign(static_cast<size_t>(n) * 784, 0.0f);
  d.labels.resize(n);
  uint64_t x = seed * 2654435761u + 1;
  auto next = [&x] {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return static_cast<float>(x % 1000) / 1000.0f;
  };
  for (int i = 0; i < n; ++i) {
    const int k = i % 10;
    d.labels[i] = k;
    float* img = d.images.data() + static_cast<size_t>(i) * 784;
    for (int p = 0; p < 784; ++p) img[p] = 0.2f * next();
    const int r0 = 2 + (k / 5) * 12, c0 = 2 + (k % 5) * 5;
    for (int r = r0; r < r0 + 4; ++r)
      for (int c = c0; c < c0 + 4; ++c) img[r * 28 + c] = 1.0f;
  }
  return d;
}

struct Cluster {
  std::vector<std::unique_ptr<ParameterStore>> stores;
  std::vector<ParameterStore*> raw;
};

Cluster MakeCluster(int shards, const std::string& opt, float lr,
                    TrainMode mode = TrainMode::kAsync, int workers = 0,
                    int staleness = 0) {
  Cluster c;
  for (int s = 0; s < shards; ++s) {
    ParameterStoreOptions o;
    o.shard_index = s;
    o.num_shards = shards;
    o.optimizer.name = opt;
    o.optimizer.learning_rate = lr;
    o.mode = mode;
    o.num_workers = workers;
    o.staleness = staleness;
    c.stores.push_back(std::move(*ParameterStore::Create(o)));
    c.raw.push_back(c.stores.back().get());
  }
  return c;
}

TEST(TrainerTest, SingleWorkerLearnsThroughTheStore) {
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 32);
  ASSERT_TRUE(model.ok()) << model.status();
  Cluster cluster = MakeCluster(2, "adagrad", 0.05f);
  auto client = NewLocalParameterClient(cluster.raw, 0);
  ASSERT_TRUE(DeclareModel(client.get(), **model, 1, 2, 1 << 20).ok());

  Dataset train = Synthetic(640, 1), test = Synthetic(200, 2);
  BatcherOptions bo;
  bo.batch_size = 32;
  bo.epochs = 2;
  auto batcher = Batcher::Create(&train, bo);
  ASSERT_TRUE(batcher.ok());
  std::vector<Progress> progress;
  TrainerOptions to;
  to.log_every = 10;
  auto r = RunDownpourWorker(to, model->get(), client.get(), batcher->get(),
                             [&](const Progress& p) { progress.push_back(p); });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 40);
  EXPECT_EQ(r->pushes, 40);
  EXPECT_EQ(r->examples, 1280);
  ASSERT_EQ(progress.size(), 4u);
  EXPECT_LT(progress.back().loss, progress.front().loss);
  EXPECT_GT(r->total.compute, 0);
  EXPECT_GT(r->total.pull, 0);
  // The StatusOr must outlive the loop (a range-for over *client->Stats()
  // would iterate a destroyed temporary).
  const absl::StatusOr<std::vector<ShardStats>> stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const ShardStats& s : *stats) EXPECT_EQ(s.pushes_applied, 40);

  // The servers' parameters, not the worker's copy, classify the test set.
  auto eval_model = BuildModel("fashion_cnn", backend.get(), 100);
  std::vector<float> params((*eval_model)->num_parameters());
  std::vector<int64_t> versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());
  ASSERT_TRUE((*eval_model)->SetParameters(params).ok());
  auto eval = EvaluateModel(eval_model->get(), test);
  ASSERT_TRUE(eval.ok());
  EXPECT_GT(eval->accuracy, 0.9);
  for (int64_t v : versions) EXPECT_EQ(v, 40);
}

TEST(TrainerTest, NPushAccruesAndPushesRemainder) {
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 16);
  ASSERT_TRUE(model.ok());
  Cluster cluster = MakeCluster(1, "sgd", 0.01f);
  auto client = NewLocalParameterClient(cluster.raw, 0);
  ASSERT_TRUE(DeclareModel(client.get(), **model, 1, 1, 1 << 20).ok());
  Dataset train = Synthetic(160, 3);
  BatcherOptions bo;
  bo.batch_size = 16;
  auto batcher = Batcher::Create(&train, bo);
  TrainerOptions to;
  to.n_push = 3;
  to.n_fetch = 2;
  to.local_lr = 0.01f;
  to.log_every = 0;
  auto r = RunDownpourWorker(to, model->get(), client.get(), batcher->get(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 10);
  EXPECT_EQ(r->pushes, 4);  // after steps 3, 6, 9 and the remainder
  EXPECT_EQ((*client->Stats())[0].pushes_applied, 4);
}

TEST(TrainerTest, ConcurrentWorkersShareTheServers) {
  auto b0 = NewOpenblasBackend(1), b1 = NewOpenblasBackend(1);
  auto m0 = BuildModel("fashion_cnn", b0.get(), 16);
  auto m1 = BuildModel("fashion_cnn", b1.get(), 16);
  Cluster cluster = MakeCluster(2, "adagrad", 0.05f);
  auto c0 = NewLocalParameterClient(cluster.raw, 0);
  auto c1 = NewLocalParameterClient(cluster.raw, 1);
  ASSERT_TRUE(DeclareModel(c0.get(), **m0, 1, 2, 1 << 20).ok());
  ASSERT_TRUE(DeclareModel(c1.get(), **m1, 99, 2, 1 << 20).ok());  // ignored
  Dataset train = Synthetic(320, 4);
  BatcherOptions bo0, bo1;
  bo0.batch_size = bo1.batch_size = 16;
  bo0.num_workers = bo1.num_workers = 2;
  bo1.worker_index = 1;
  auto bt0 = Batcher::Create(&train, bo0);
  auto bt1 = Batcher::Create(&train, bo1);
  absl::StatusOr<TrainResult> r0, r1;
  TrainerOptions to;
  to.log_every = 0;
  std::thread t0([&] { r0 = RunDownpourWorker(to, m0->get(), c0.get(), bt0->get(), {}); });
  std::thread t1([&] { r1 = RunDownpourWorker(to, m1->get(), c1.get(), bt1->get(), {}); });
  t0.join();
  t1.join();
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto stats = c0->Stats();
  for (const ShardStats& s : *stats) {
    EXPECT_EQ(s.pushes_applied, r0->pushes + r1->pushes);
    EXPECT_EQ(s.total_chunk_updates, s.num_chunks * (r0->pushes + r1->pushes));
  }
}

TEST(TrainerTest, RejectsBadOptionsAndUndeclaredClient) {
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 16);
  Cluster cluster = MakeCluster(1, "sgd", 0.01f);
  auto client = NewLocalParameterClient(cluster.raw, 0);
  Dataset train = Synthetic(32, 5);
  BatcherOptions bo;
  bo.batch_size = 16;
  auto batcher = Batcher::Create(&train, bo);
  TrainerOptions bad;
  bad.n_push = 0;
  EXPECT_FALSE(RunDownpourWorker(bad, model->get(), client.get(), batcher->get(), {}).ok());
  auto r = RunDownpourWorker({}, model->get(), client.get(), batcher->get(), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

// W workers in threads against in-process stores in `mode`; returns the
// final flat parameters.
std::vector<float> TrainTogether(TrainMode mode, TrainMode tmode, int workers,
                                 int staleness = 0, bool overlap = false,
                                 bool wait_free = true) {
  Cluster cluster = MakeCluster(2, "momentum", 0.02f, mode, workers, staleness);
  Dataset train = Synthetic(96 * workers, 6);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<ParameterClient>> clients;
  std::vector<std::unique_ptr<Batcher>> batchers;
  for (int w = 0; w < workers; ++w) {
    backends.push_back(NewOpenblasBackend(1));
    models.push_back(std::move(*BuildModel("fashion_cnn", backends.back().get(), 16)));
    clients.push_back(NewLocalParameterClient(cluster.raw, w));
    EXPECT_TRUE(DeclareModel(clients.back().get(), *models.back(), 5, 2, 1 << 20).ok());
    BatcherOptions bo;
    bo.batch_size = 16;
    bo.epochs = 2;
    bo.num_workers = workers;
    bo.worker_index = w;
    bo.seed = 11;
    batchers.push_back(std::move(*Batcher::Create(&train, bo)));
  }
  std::vector<absl::StatusOr<TrainResult>> results(workers);
  std::vector<std::thread> threads;
  TrainerOptions to;
  to.mode = tmode;
  to.log_every = 0;
  to.overlap = overlap;
  to.wait_free = wait_free;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      results[w] = RunDownpourWorker(to, models[w].get(), clients[w].get(),
                                     batchers[w].get(), {});
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : results) EXPECT_TRUE(r.ok()) << r.status();
  std::vector<float> params(models[0]->num_parameters());
  std::vector<int64_t> versions;
  EXPECT_TRUE(clients[0]->Pull(absl::MakeSpan(params), &versions).ok());
  if (mode == TrainMode::kAsync) {
    // Every push counted once, however many pieces it went in.
    int64_t pushes = 0;
    for (auto& r : results) pushes += r.ok() ? r->pushes : 0;
    const absl::StatusOr<std::vector<ShardStats>> stats = clients[0]->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    for (const ShardStats& s : stats.value_or(std::vector<ShardStats>())) {
      EXPECT_EQ(s.pushes_applied, pushes);
    }
  }
  if (mode == TrainMode::kSync) {
    // 6 steps per worker per epoch, 2 epochs, every gradient in a step.
    const absl::StatusOr<std::vector<ShardStats>> stats = clients[0]->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    for (const ShardStats& s : stats.value_or(std::vector<ShardStats>())) {
      EXPECT_EQ(s.steps, 12);
      EXPECT_EQ(s.dropped_stale, 0);
    }
  }
  return params;
}

TEST(TrainerTest, SyncModeIsBitIdenticalAcrossRuns) {
  std::vector<float> a = TrainTogether(TrainMode::kSync, TrainMode::kSync, 3);
  std::vector<float> b = TrainTogether(TrainMode::kSync, TrainMode::kSync, 3);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Without overlap, with the overlapped exchange, and wait-free (the gradient
// pushed in buckets during the backward pass, each layer's forward waiting
// for its own parameters): the same bits.
TEST(TrainerTest, OverlapOnAndOffGiveTheSameParametersInSyncMode) {
  std::vector<float> off = TrainTogether(TrainMode::kSync, TrainMode::kSync, 3);
  std::vector<float> on = TrainTogether(TrainMode::kSync, TrainMode::kSync, 3, 0,
                                        /*overlap=*/true, /*wait_free=*/false);
  std::vector<float> wait_free = TrainTogether(
      TrainMode::kSync, TrainMode::kSync, 3, 0, /*overlap=*/true);
  ASSERT_EQ(off.size(), on.size());
  EXPECT_EQ(0, std::memcmp(off.data(), on.data(), off.size() * sizeof(float)));
  ASSERT_EQ(off.size(), wait_free.size());
  EXPECT_EQ(0, std::memcmp(off.data(), wait_free.data(),
                           off.size() * sizeof(float)));
}

TEST(TrainerTest, OverlapInAsyncAndSspModeAppliesEveryPush) {
  for (auto [mode, tmode] : {std::pair{TrainMode::kAsync, TrainMode::kAsync},
                             std::pair{TrainMode::kSsp, TrainMode::kSsp}}) {
    for (bool wait_free : {false, true}) {
      std::vector<float> p =
          TrainTogether(mode, tmode, 2, 1, /*overlap=*/true, wait_free);
      for (float x : p) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

// A client whose push's last piece (the model's first layers, sent when the
// backward pass has ended) takes a while, as over a network: the next step
// starts before the exchange has finished.
class SlowLastPieceClient final : public ParameterClient {
 public:
  SlowLastPieceClient(std::unique_ptr<ParameterClient> c, absl::Duration delay)
      : c_(std::move(c)), delay_(delay) {}
  // Checks `position` as each push begins: it must name the step before
  // (acknowledged before this push could start), so that a worker killed
  // now redoes one step at most; and as its last piece is about to go,
  // after its delay: it must not name this push's step (or a later one),
  // whose gradient a worker killed now would lose. Not owned.
  void CheckPosition(const DataPositionFile* position) { position_ = position; }
  int64_t max_position_seen() const { return max_position_seen_; }
  absl::Status Declare(const ModelLayout& layout,
                       absl::Span<const float> initial) override {
    return c_->Declare(layout, initial);
  }
  using ParameterClient::Pull;
  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options) override {
    return c_->Pull(params, versions, options);
  }
  absl::Status Push(int64_t seq, absl::Span<const float> grads,
                    absl::Span<const int64_t> base) override {
    return c_->Push(seq, grads, base);
  }
  absl::Status SetPushBreaks(std::vector<int64_t> breaks) override {
    return c_->SetPushBreaks(std::move(breaks));
  }
  absl::Status PushFrom(int64_t seq, absl::Span<const float> grads,
                        absl::Span<const int64_t> base, int64_t from,
                        const PulledValues* pulled) override {
    // One step per push: push `seq` carries step `seq`'s gradient.
    if (position_ != nullptr && seq != began_seq_) {
      began_seq_ = seq;
      const int64_t recorded = position_->Read();
      if (recorded < seq - 1) {
        return absl::InternalError(absl::StrCat(
            "push ", seq, " began with the data position at ", recorded,
            " steps, not ", seq - 1));
      }
    }
    if (from != 0) return c_->PushFrom(seq, grads, base, from, pulled);
    absl::SleepFor(delay_);
    if (position_ != nullptr) {
      const int64_t recorded = position_->Read();
      max_position_seen_ = std::max(max_position_seen_, recorded);
      if (recorded >= seq) {
        return absl::InternalError(absl::StrCat(
            "the data position says ", recorded, " steps while push ", seq,
            " is still in flight"));
      }
    }
    return c_->PushFrom(seq, grads, base, from, pulled);
  }
  absl::Status Leave() override { return c_->Leave(); }
  absl::StatusOr<std::vector<ShardStats>> Stats() override {
    return c_->Stats();
  }
  const ShardMap& shard_map() const override { return c_->shard_map(); }

 private:
  std::unique_ptr<ParameterClient> c_;
  const absl::Duration delay_;
  const DataPositionFile* position_ = nullptr;
  int64_t max_position_seen_ = 0;
  int64_t began_seq_ = 0;  // The push whose beginning was checked last.
};

// 20 async wait-free steps (batch 16) of one worker whose push's last piece
// takes `piece_delay`, each step `step_delay` longer after its backward pass
// (while that piece is on its way); the shards' stats after them.
absl::StatusOr<std::vector<ShardStats>> TrainWithSlowLastPiece(
    absl::Duration piece_delay, double fresh_wait_fraction,
    absl::Duration step_delay, DataPositionFile* position = nullptr,
    int64_t* max_position_seen = nullptr) {
  Cluster cluster = MakeCluster(2, "momentum", 0.02f);
  Dataset train = Synthetic(16 * 20, 6);
  auto backend = NewOpenblasBackend(1);
  absl::StatusOr<std::unique_ptr<Model>> model =
      BuildModel("fashion_cnn", backend.get(), 16);
  if (!model.ok()) return model.status();
  SlowLastPieceClient client(NewLocalParameterClient(cluster.raw, 0),
                             piece_delay);
  client.CheckPosition(position);
  absl::Status declared = DeclareModel(&client, **model, 5, 2, 1 << 20);
  if (!declared.ok()) return declared;
  BatcherOptions bo;
  bo.batch_size = 16;
  absl::StatusOr<std::unique_ptr<Batcher>> batcher = Batcher::Create(&train, bo);
  if (!batcher.ok()) return batcher.status();
  TrainerOptions to;
  to.log_every = 0;
  to.overlap = true;
  to.wait_free = true;
  to.fresh_wait_fraction = fresh_wait_fraction;
  to.debug_step_delay = step_delay;
  to.position = position;
  absl::StatusOr<TrainResult> r =
      RunDownpourWorker(to, model->get(), &client, batcher->get(), {});
  if (max_position_seen != nullptr) {
    *max_position_seen = client.max_position_seen();
  }
  if (!r.ok()) return r.status();
  if (r->pushes != 20) {
    return absl::InternalError(absl::StrCat(r->pushes, " pushes, not 20"));
  }
  return client.Stats();
}

// Async wait-free with every exchange still in flight when the next step
// starts: each step still computes from the newest parameters that have
// arrived, one exchange behind at most, never from parameters that stopped
// being refreshed (the servers' staleness says which).
TEST(TrainerTest, AsyncWaitFreeStaysOneExchangeBehindWhenPushesAreSlow) {
  const absl::StatusOr<std::vector<ShardStats>> stats = TrainWithSlowLastPiece(
      absl::Milliseconds(30), /*fresh_wait_fraction=*/0, absl::ZeroDuration());
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const ShardStats& s : *stats) {
    EXPECT_EQ(s.pushes_applied, 20);
    // One worker: a push is computed from the parameters after its
    // second-to-last push at the oldest (staleness 1).
    EXPECT_LE(s.staleness_max, 1);
  }
}

// Async wait-free whose last piece comes back about 30 ms after the next
// step began (a step is 30 ms and more): with a wait of up to a whole
// step's time for it, each step computes from the parameters after its
// worker's last push (staleness 0); without, from the ones before
// (staleness 1).
TEST(TrainerTest, AsyncWaitFreeWaitsAShareOfAStepForTheLastExchange) {
  auto mean_staleness = [](double fraction) -> double {
    const absl::StatusOr<std::vector<ShardStats>> stats =
        TrainWithSlowLastPiece(absl::Milliseconds(60), fraction,
                               absl::Milliseconds(30));
    if (!stats.ok()) {
      ADD_FAILURE() << stats.status();
      return std::nan("");
    }
    double mean = 0;
    for (const ShardStats& s : *stats) {
      EXPECT_EQ(s.pushes_applied, 20);
      EXPECT_LE(s.staleness_max, 1);
      mean += s.staleness_mean / stats->size();
    }
    return mean;
  };
  // A few steps may still miss the reply on a loaded machine.
  EXPECT_LE(mean_staleness(1.0), 0.35);
  EXPECT_GE(mean_staleness(0), 0.65);
}

// The data position names only steps whose pushes the servers have
// acknowledged: with each push's last piece 30 ms on its way after the step
// ended, a position written at the end of the step (as it was) named a push
// still in flight, whose gradient a kill would lose, the restarted worker
// skipping its batch. And it names each one before the next push starts, so
// a restart redoes one step at most.
TEST(TrainerTest, DataPositionNamesOnlyAcknowledgedPushes) {
  const std::string path = absl::StrCat(
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR")
                                            : "/tmp",
      "/trainer_test.position");
  std::remove(path.c_str());
  DataPositionFile position(path, "trainer_test");
  int64_t max_seen = 0;
  const absl::StatusOr<std::vector<ShardStats>> stats =
      TrainWithSlowLastPiece(absl::Milliseconds(30), /*fresh_wait_fraction=*/0,
                             absl::ZeroDuration(), &position, &max_seen);
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const ShardStats& s : *stats) EXPECT_EQ(s.pushes_applied, 20);
  // Positions were written and checked (the last push's step is 20; the
  // natural end removes the file).
  EXPECT_GE(max_seen, 15);
  EXPECT_FALSE(std::ifstream(path).good());
}

// Two replicas fed the same batches push the same mean gradient as one
// replica would: the local aggregation is exact.
TEST(TrainerTest, ReplicasAggregateLocallyIntoOnePush) {
  Dataset train = Synthetic(128, 8);
  std::vector<float> initial;  // The declared parameters, before training.
  auto run = [&](int replicas, bool overlap) {
    Cluster cluster = MakeCluster(2, "sgd", 0.05f);
    std::vector<std::unique_ptr<Backend>> backends;
    std::vector<std::unique_ptr<Model>> models;
    std::vector<std::unique_ptr<Batcher>> batchers;
    std::vector<Replica> group;
    for (int r = 0; r < replicas; ++r) {
      backends.push_back(NewOpenblasBackend(1));
      models.push_back(std::move(*BuildModel("fashion_cnn", backends.back().get(), 16)));
      BatcherOptions bo;
      bo.batch_size = 16;
      bo.seed = 3;
      batchers.push_back(std::move(*Batcher::Create(&train, bo)));
      group.push_back({models.back().get(), batchers.back().get()});
    }
    auto client = NewLocalParameterClient(cluster.raw, 0);
    EXPECT_TRUE(DeclareModel(client.get(), *models[0], 5, 2, 1 << 20).ok());
    initial.assign(models[0]->num_parameters(), 0.0f);
    std::vector<int64_t> initial_versions;
    EXPECT_TRUE(client->Pull(absl::MakeSpan(initial), &initial_versions).ok());
    TrainerOptions to;
    to.log_every = 0;
    to.overlap = overlap;
    absl::StatusOr<TrainResult> r = RunDownpourWorker(to, group, client.get(), {});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->pushes, 8);
    EXPECT_EQ(r->examples, 128 * replicas);
    std::vector<float> params(models[0]->num_parameters());
    std::vector<int64_t> versions;
    EXPECT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());
    return params;
  };
  const std::vector<float> one = run(1, false), two = run(2, false);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  // With one worker, overlap only delays the parameters; it still learns
  // from every batch and ends finite and different from the start. (Whether
  // it also ends different from the run without overlap depends on thread
  // timing: a fetch takes the background pull's parameters when they have
  // arrived, and under a sanitizer's slower main thread they always had, so
  // the end state is compared with the start, as this comment promises.)
  const std::vector<float> lapped = run(2, true);
  ASSERT_EQ(initial.size(), lapped.size());
  for (float x : lapped) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(0, std::memcmp(initial.data(), lapped.data(),
                           initial.size() * sizeof(float)));
}

TEST(TrainerTest, SspModeFinishesWithEveryPushApplied) {
  std::vector<float> p = TrainTogether(TrainMode::kSsp, TrainMode::kSsp, 3, 1);
  for (float x : p) ASSERT_TRUE(std::isfinite(x));
}

TEST(TrainerTest, SyncModeNeedsFetchAndPushEveryStep) {
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 16);
  Cluster cluster = MakeCluster(1, "sgd", 0.01f, TrainMode::kSync, 1);
  auto client = NewLocalParameterClient(cluster.raw, 0);
  Dataset train = Synthetic(32, 5);
  auto batcher = Batcher::Create(&train, BatcherOptions());
  TrainerOptions to;
  to.mode = TrainMode::kSync;
  to.n_push = 2;
  EXPECT_EQ(RunDownpourWorker(to, model->get(), client.get(), batcher->get(), {})
                .status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A failed pinned (or any host) allocation is an error status, not a
// std::bad_alloc that would end the worker through std::terminate.
TEST(TrainerTest, FailedHostAllocationIsResourceExhausted) {
  FailingHostAllocator failing;
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 32);
  ASSERT_TRUE(model.ok()) << model.status();
  Cluster cluster = MakeCluster(1, "sgd", 0.05f);
  auto client = NewLocalParameterClient(cluster.raw, 0);
  ASSERT_TRUE(DeclareModel(client.get(), **model, 1, 1, 1 << 20).ok());
  Dataset train = Synthetic(64, 1);
  auto batcher = Batcher::Create(&train, BatcherOptions());
  ASSERT_TRUE(batcher.ok());
  for (bool overlap : {false, true}) {
    TrainerOptions to;
    to.overlap = overlap;
    to.host_allocator = &failing;
    auto r = RunDownpourWorker(to, model->get(), client.get(), batcher->get(),
                               nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
        << r.status();
    EXPECT_NE(r.status().message().find("failing"), std::string::npos);
  }
}

}  // namespace
}  // namespace downpour
