// The transport through real ps_server processes on loopback: chunking into
// parts round-trips odd sizes exactly (Pull, Push and PushPull, with and
// without a limit on calls in flight), fp16/bf16 stay within their format's
// bound, pulls sent from the store's buffers are never torn by concurrent
// pushes, and an oversize request is refused cleanly while the server keeps
// serving.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/sharding.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "rpc/wire.h"
#include "tests/test_cluster.h"
#include "worker/grpc_ps_client.h"

namespace downpour {
namespace {

// Tensors whose sizes straddle chunk and part boundaries: with 64-byte
// chunks (16 floats) and 4 KiB parts, one float past a chunk boundary,
// an empty tensor, a single element, and enough to need many parts.
ModelLayout OddLayout(int shards) {
  ModelLayout l;
  l.tensors = {{"a", {17}},  {"empty", {0}}, {"one", {1}},
               {"b", {16}},  {"c", {3, 5}},  {"big", {4099}}};
  l.num_shards = shards;
  l.max_chunk_bytes = 64;
  return l;
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 2);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct Case {
  int shards;
  int connections;
  bool streaming_pulls;  // Pulls write with non-temporal stores.
  int calls_in_flight;   // Per connection; 0: no limit.
};

class TransportTest : public ::testing::TestWithParam<Case> {};

TEST_P(TransportTest, PartsRoundTripOddSizesExactly) {
  const Case c = GetParam();
  TestClusterOptions co;
  co.num_shards = c.shards;
  co.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=1"};
  auto cluster = TestCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GrpcClientOptions o;
  o.hosts = (*cluster)->hosts();
  o.part_bytes = 4096;
  o.connections_per_shard = c.connections;
  o.max_calls_in_flight_per_connection = c.calls_in_flight;
  o.streaming_pull_min_bytes =
      c.streaming_pulls ? 0 : std::numeric_limits<int64_t>::max();
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const ModelLayout layout = OddLayout(c.shards);
  const int64_t n = layout.NumElements();
  const std::vector<float> init = Random(n, 1);
  ASSERT_TRUE((*client)->Declare(layout, init).ok());
  // Several requests per shard: the declaration itself went in parts.
  const ShardMap& map = (*client)->shard_map();
  int64_t shard0_bytes = 0;
  for (int32_t id : map.shard_chunks[0]) shard0_bytes += map.chunks[id].num_elements * 4;
  ASSERT_GT(shard0_bytes, 2 * o.part_bytes);

  std::vector<float> got(n, -1);
  std::vector<int64_t> versions;
  ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
  EXPECT_EQ(got, init);
  // A push of g with sgd lr 1 gives init - g exactly (both are f32 sums of
  // one term); then pull again.
  const std::vector<float> g = Random(n, 2);
  ASSERT_TRUE((*client)->Push(1, g, versions).ok());
  ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], init[i] - g[i]) << i;
  for (int64_t v : versions) EXPECT_EQ(v, 1);
  // A retry of the same push (every part) is not applied again.
  ASSERT_TRUE((*client)->Push(1, g, std::vector<int64_t>(versions.size(), 0)).ok());
  ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], init[i] - g[i]) << i;

  // PushPull: each part's values after its push come back in its reply.
  const std::vector<float> g2 = Random(n, 3);
  std::vector<float> after(n, -1);
  std::vector<int64_t> after_versions;
  ASSERT_TRUE((*client)
                  ->PushPull(2, g2, versions, absl::MakeSpan(after),
                             &after_versions, PullOptions())
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(after[i], (init[i] - g[i]) - g2[i]) << i;
  }
  for (int64_t v : after_versions) EXPECT_EQ(v, 2);
  // Retried, it is not applied again, and still returns the values.
  std::fill(after.begin(), after.end(), -1.0f);
  ASSERT_TRUE((*client)
                  ->PushPull(2, g2, versions, absl::MakeSpan(after),
                             &after_versions, PullOptions())
                  .ok());
  for (int64_t v : after_versions) EXPECT_EQ(v, 2);
  ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
  EXPECT_EQ(after, got);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], (init[i] - g[i]) - g2[i]) << i;
  }
  for (int64_t v : versions) EXPECT_EQ(v, 2);
  EXPECT_TRUE((*cluster)->AllRunning());
}

INSTANTIATE_TEST_SUITE_P(
    ShardsAndConnections, TransportTest,
    ::testing::Values(Case{1, 1, false, 0}, Case{2, 3, false, 0},
                      Case{2, 3, true, 0}, Case{2, 1, false, 1},
                      Case{2, 2, true, 2}));

TEST(TransportCompressionTest, Fp16AndBf16StayWithinTheirBound) {
  for (const char* name : {"fp16", "bf16"}) {
    TestClusterOptions co;
    co.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=1"};
    auto cluster = TestCluster::Start(co);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    GrpcClientOptions o;
    o.hosts = (*cluster)->hosts();
    o.part_bytes = 4096;
    o.push_encoding = *wire::ParseEncoding(name);
    o.pull_encoding = o.push_encoding;
    auto client = NewGrpcParameterClient(o);
    ASSERT_TRUE(client.ok());
    const ModelLayout layout = OddLayout(1);
    const int64_t n = layout.NumElements();
    const std::vector<float> init = Random(n, 3);
    ASSERT_TRUE((*client)->Declare(layout, init).ok());  // Declared exactly.
    std::vector<float> got(n);
    std::vector<int64_t> versions;
    ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
    const double rel = std::string(name) == "fp16" ? std::ldexp(1.0, -11)
                                                   : std::ldexp(1.0, -8);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::abs(got[i] - init[i]), rel * std::abs(init[i]) + 1e-7)
          << name << " pulled element " << i;
    }
    // Push zeros but one value: only its (encoded) step applies.
    std::vector<float> g(n, 0.0f);
    g[5] = 0.1f;
    ASSERT_TRUE((*client)->Push(1, g, versions).ok());
    ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
    const double want = init[5] - 0.1;
    EXPECT_LE(std::abs(got[5] - want), rel * (std::abs(init[5]) + 0.1) * 2 + 1e-7)
        << name;
    // A PushPull returns the values in the pull encoding as well.
    std::vector<float> exchanged(n);
    std::vector<int64_t> exchanged_versions;
    g[5] = 0;
    g[7] = 0.1f;
    ASSERT_TRUE((*client)
                    ->PushPull(2, g, versions, absl::MakeSpan(exchanged),
                               &exchanged_versions, PullOptions())
                    .ok());
    const double want7 = init[7] - 0.1;
    EXPECT_LE(std::abs(exchanged[7] - want7),
              rel * (std::abs(init[7]) + 0.1) * 2 + 1e-7)
        << name;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 5 || i == 7) continue;
      ASSERT_LE(std::abs(exchanged[i] - init[i]), rel * std::abs(init[i]) + 1e-7)
          << name << " exchanged element " << i;
    }
  }
}

// Pulls are sent straight from the store's value buffers while pushes land:
// over real servers, every pulled chunk must still be one whole version.
// With sgd at rate 1, zero initial values and a gradient of -1 everywhere,
// a chunk at version v holds v in every element; a torn chunk would mix two.
TEST(TransportZeroCopyTest, PullsDuringPushesAreNeverTorn) {
  TestClusterOptions co;
  co.num_shards = 2;
  co.server_flags = {"--optimizer=sgd", "--lr_schedule=none", "--lr=1"};
  auto cluster = TestCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ModelLayout layout;
  layout.tensors = {{"w", {1 << 20}}};  // 4 MiB in 256 KiB chunks.
  layout.num_shards = 2;
  layout.max_chunk_bytes = 256 << 10;
  const int64_t n = layout.NumElements();
  auto make_client = [&](int worker) {
    GrpcClientOptions o;
    o.hosts = (*cluster)->hosts();
    o.worker_id = worker;
    o.part_bytes = 1 << 20;
    return NewGrpcParameterClient(o);
  };
  auto pusher = make_client(0);
  ASSERT_TRUE(pusher.ok()) << pusher.status();
  ASSERT_TRUE((*pusher)->Declare(layout, std::vector<float>(n, 0.0f)).ok());
  constexpr int kPushes = 30;
  std::atomic<bool> pushing{true};
  std::thread push_thread([&] {
    const std::vector<float> minus_one(n, -1.0f);
    std::vector<float> params(n);
    std::vector<int64_t> versions;
    for (int seq = 1; seq <= kPushes; ++seq) {
      EXPECT_TRUE((*pusher)->Pull(absl::MakeSpan(params), &versions).ok());
      EXPECT_TRUE((*pusher)->Push(seq, minus_one, versions).ok());
    }
    pushing = false;
  });
  std::vector<std::thread> pullers;
  std::atomic<int64_t> chunks_checked{0};
  for (int w = 1; w <= 2; ++w) {
    pullers.emplace_back([&, w] {
      auto client = make_client(w);
      ASSERT_TRUE(client.ok());
      ASSERT_TRUE((*client)->Declare(layout, std::vector<float>(n, 0.0f)).ok());
      const ShardMap& map = (*client)->shard_map();
      std::vector<float> got(n);
      std::vector<int64_t> versions;
      do {
        ASSERT_EQ((*client)->Pull(absl::MakeSpan(got), &versions), absl::OkStatus());
        for (const Chunk& c : map.chunks) {
          const float want = static_cast<float>(versions[c.id]);
          const float* v = got.data() + c.flat_offset;
          const int64_t bad =
              std::find_if(v, v + c.num_elements,
                           [want](float x) { return x != want; }) - v;
          ASSERT_EQ(bad, c.num_elements)
              << "chunk " << c.id << " at version " << versions[c.id]
              << " has " << v[bad] << " at element " << bad;
          ++chunks_checked;
        }
      } while (pushing);
    });
  }
  push_thread.join();
  for (std::thread& t : pullers) t.join();
  EXPECT_GT(chunks_checked.load(), 0);
  std::vector<float> final_values(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE((*pusher)->Pull(absl::MakeSpan(final_values), &versions).ok());
  for (float x : final_values) ASSERT_EQ(x, static_cast<float>(kPushes));
  EXPECT_TRUE((*cluster)->AllRunning());
}

TEST(TransportLimitsTest, OversizeRequestIsRefusedAndServerKeepsServing) {
  auto cluster = TestCluster::Start(TestClusterOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GrpcClientOptions o;
  o.hosts = (*cluster)->hosts();
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok());
  ModelLayout layout;
  layout.tensors = {{"w", {1000}}};
  layout.num_shards = 1;
  layout.max_chunk_bytes = 1 << 20;
  ASSERT_TRUE((*client)->Declare(layout, std::vector<float>(1000, 1.0f)).ok());

  // A raw push message above kMaxMessageBytes, sent with a client that
  // allows sending it: the server refuses it with RESOURCE_EXHAUSTED.
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto credentials = BuildChannelCredentials(o.security);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  auto channel = grpc::CreateCustomChannel(o.hosts[0], *credentials, args);
  grpc::GenericStub stub(channel);
  std::string big(static_cast<size_t>(kMaxMessageBytes) + 1024, '\0');
  grpc::Slice slice(big);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, kPushMethod, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();

  // A layout whose single chunk could never fit a message is refused by the
  // client before anything is sent.
  ModelLayout huge;
  huge.tensors = {{"w", {int64_t{kMaxMessageBytes} / 4 + 1}}};
  huge.num_shards = 1;
  huge.max_chunk_bytes = int64_t{1} << 30;
  auto other = NewGrpcParameterClient(o);
  absl::Status s = (*other)->Declare(
      huge, std::vector<float>(static_cast<size_t>(kMaxMessageBytes / 4 + 1)));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;

  // Still serving.
  std::vector<float> got(1000);
  std::vector<int64_t> versions;
  EXPECT_TRUE((*client)->Pull(absl::MakeSpan(got), &versions).ok());
  EXPECT_EQ(got[999], 1.0f);
  EXPECT_TRUE((*cluster)->AllRunning());
}

}  // namespace
}  // namespace downpour
