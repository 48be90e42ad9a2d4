// No lost or doubled update, through real servers: several gRPC clients push
// known gradients concurrently to a 2-shard cluster running plain SGD with
// lr = 1; one client sends every push twice (as a retry after a lost reply
// would). The final parameters must equal the exact expected sum. And when
// the servers really drop replies, the client's own retries (one call at a
// time per connection, or all at once) still give exact results.
#include <algorithm>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_cluster.h"
#include "worker/grpc_ps_client.h"

namespace downpour {
namespace {

TEST(ExactlyOnceTest, ConcurrentPushesAndRetriesSumExactly) {
  TestClusterOptions o;
  o.num_shards = 2;
  o.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=1"};
  auto cluster = TestCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  ModelLayout layout;
  layout.tensors = {{"big", {256, 257}}, {"small", {3}}, {"scalar", {}}};
  layout.num_shards = 2;
  layout.max_chunk_bytes = 32 << 10;
  layout.spread_min_bytes = 8 << 10;
  const int64_t n = layout.NumElements();

  constexpr int kClients = 4, kPushes = 60;
  std::vector<std::unique_ptr<ParameterClient>> clients;
  for (int c = 0; c < kClients; ++c) {
    GrpcClientOptions co;
    co.hosts = (*cluster)->hosts();
    co.worker_id = c;
    auto client = NewGrpcParameterClient(co);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Declare(layout, std::vector<float>(n, 0.0f)).ok());
    clients.push_back(std::move(*client));
  }

  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(kClients);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      // Client c's push p carries -(c + 1) * p at element i % 7 == c % 7 and
      // -1 elsewhere: integers, so float32 sums are exact.
      std::vector<int64_t> versions;
      std::vector<float> params(n), grad(n);
      for (int p = 1; p <= kPushes && errors[c].ok(); ++p) {
        errors[c] = clients[c]->Pull(absl::MakeSpan(params), &versions);
        for (int64_t i = 0; i < n; ++i) {
          grad[i] = (i % 7 == c % 7) ? -(c + 1.0f) * p : -1.0f;
        }
        const int attempts = c == 0 ? 2 : 1;  // client 0 retries every push
        for (int a = 0; a < attempts && errors[c].ok(); ++a) {
          errors[c] = clients[c]->Push(p, grad, versions);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& e : errors) ASSERT_TRUE(e.ok()) << e;

  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(clients[0]->Pull(absl::MakeSpan(params), &versions).ok());
  const double tri = kPushes * (kPushes + 1) / 2.0;
  for (int64_t i = 0; i < n; ++i) {
    double expected = 0;
    for (int c = 0; c < kClients; ++c) {
      expected += (i % 7 == c % 7) ? (c + 1.0) * tri : kPushes;
    }
    ASSERT_EQ(params[i], static_cast<float>(expected)) << "element " << i;
  }
  for (int64_t v : versions) EXPECT_EQ(v, kClients * kPushes);
  auto stats = clients[1]->Stats();
  ASSERT_TRUE(stats.ok());
  for (const ShardStats& s : *stats) {
    EXPECT_EQ(s.pushes_applied, kClients * kPushes);
    EXPECT_EQ(s.pushes_duplicate, kPushes);
    EXPECT_TRUE(s.rejected.empty());
  }
  EXPECT_TRUE((*cluster)->AllRunning());
}

// Every third reply is lost after its request took effect: each Pull,
// Push and PushPull retries the parts that failed, a retried push is not
// applied again, and a retried PushPull still returns the values.
TEST(ExactlyOnceTest, ClientRetriesAfterLostRepliesStayExact) {
  for (int window : {1, 0}) {
    TestClusterOptions o;
    o.num_shards = 2;
    o.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=1", "--debug_drop_reply_every=3"};
    auto cluster = TestCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ModelLayout layout;
    layout.tensors = {{"w", {5000}}, {"b", {7}}};
    layout.num_shards = 2;
    layout.max_chunk_bytes = 2048;
    const int64_t n = layout.NumElements();
    GrpcClientOptions co;
    co.hosts = (*cluster)->hosts();
    co.part_bytes = 4096;  // Several parts, so calls queue behind each other.
    co.max_calls_in_flight_per_connection = window;
    co.max_attempts = 10;
    auto client = NewGrpcParameterClient(co);
    ASSERT_TRUE(client.ok()) << client.status();
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = static_cast<float>(i % 11);
    ASSERT_TRUE((*client)->Declare(layout, expected).ok());

    std::vector<float> params(n, -1), grad(n);
    std::vector<int64_t> versions;
    ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
    EXPECT_EQ(params, expected) << "window " << window;
    constexpr int kRounds = 4;
    for (int k = 1; k <= kRounds; ++k) {
      for (int64_t i = 0; i < n; ++i) {
        grad[i] = static_cast<float>((i * k) % 5) - 2.0f;  // Integers: exact.
        expected[i] -= grad[i];
      }
      std::fill(params.begin(), params.end(), -1.0f);
      const std::vector<int64_t> base = versions;
      // Odd rounds as one PushPull, even ones as a Push and then a Pull.
      if (k % 2 == 1) {
        ASSERT_TRUE((*client)
                        ->PushPull(k, grad, base, absl::MakeSpan(params),
                                   &versions, PullOptions())
                        .ok())
            << "window " << window << " round " << k;
      } else {
        ASSERT_TRUE((*client)->Push(k, grad, base).ok());
        ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
      }
      ASSERT_EQ(params, expected) << "window " << window << " round " << k;
      for (int64_t v : versions) ASSERT_EQ(v, k);
    }
    auto stats = (*client)->Stats();
    ASSERT_TRUE(stats.ok());
    for (const ShardStats& s : *stats) {
      EXPECT_GT(s.pushes_duplicate, 0) << "no push reply was lost";
      EXPECT_TRUE(s.rejected.empty());
    }
    EXPECT_TRUE((*cluster)->AllRunning());
  }
}

}  // namespace
}  // namespace downpour
