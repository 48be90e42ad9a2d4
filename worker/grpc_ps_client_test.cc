// The gRPC client against real servers in this process (ParameterServerHost
// on loopback): every call of the ParameterClient interface over two shards,
// its option checks, a server listed under the wrong shard, and retries of
// replies the servers drop.
#include "worker/grpc_ps_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <set>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/metrics_scrape.h"
#include "gtest/gtest.h"
#include "server/ps_host.h"

namespace downpour {
namespace {

// Shards with sgd at rate 1 (a push of g turns v into exactly v - g);
// `sync`: in sync mode for `workers` workers, with their metrics endpoints.
std::vector<std::unique_ptr<ParameterServerHost>> StartShards(
    int n, int drop_reply_every = 0, bool sync = false, int workers = 1) {
  std::vector<std::unique_ptr<ParameterServerHost>> hosts;
  for (int s = 0; s < n; ++s) {
    ParameterServerHostOptions o;
    o.store.shard_index = s;
    o.store.num_shards = n;
    o.store.optimizer.name = "sgd";
    o.store.optimizer.learning_rate = 1;
    o.service.debug_drop_reply_every = drop_reply_every;
    if (sync) {
      o.store.mode = TrainMode::kSync;
      o.store.num_workers = workers;
      o.metrics_port = 0;
    }
    auto host = ParameterServerHost::Create(o);
    EXPECT_TRUE(host.ok()) << host.status();
    if (host.ok()) hosts.push_back(std::move(*host));
  }
  return hosts;
}

std::vector<std::string> Addresses(
    const std::vector<std::unique_ptr<ParameterServerHost>>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h->address());
  return out;
}

ModelLayout Layout(int shards) {
  ModelLayout l;
  l.tensors = {{"w", {64, 33}}, {"b", {7}}, {"scalar", {}}};
  l.num_shards = shards;
  l.max_chunk_bytes = 1024;
  return l;
}

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 97);
  return v;
}

// Every payload test runs three times: payloads in the messages, through
// the worker's shared memory with gRPC calls, and with the pushes as calls
// through the shared memory too (the servers are on loopback, in this
// process).
enum class Route { kWire, kSharedMemory, kSharedCalls };
class PayloadsTest : public ::testing::TestWithParam<Route> {};
INSTANTIATE_TEST_SUITE_P(
    OnTheWireAndInSharedMemory, PayloadsTest,
    ::testing::Values(Route::kWire, Route::kSharedMemory, Route::kSharedCalls),
    [](const ::testing::TestParamInfo<Route>& i) {
      return i.param == Route::kWire           ? "Wire"
             : i.param == Route::kSharedMemory ? "SharedMemory"
                                               : "SharedCalls";
    });

void SetRoute(Route route, GrpcClientOptions* o) {
  o->shared_memory = route != Route::kWire;
  o->shared_memory_calls = route == Route::kSharedCalls;
}

TEST_P(PayloadsTest, EveryCallOverTwoShards) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  GrpcClientOptions o;
  o.hosts = Addresses(hosts);
  o.worker_id = 3;
  o.part_bytes = 4096;
  SetRoute(GetParam(), &o);
  std::string note;
  o.on_note = [&note](const std::string& m) { note = m; };
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const ModelLayout layout = Layout(2);
  const int64_t n = layout.NumElements();
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  EXPECT_EQ((*client)->Pull(absl::MakeSpan(params), &versions).code(),
            absl::StatusCode::kFailedPrecondition);  // Before Declare.

  const std::vector<float> init = Ramp(n, 0.5f);
  ASSERT_TRUE((*client)->Declare(layout, init).ok());
  EXPECT_EQ(note,
            GetParam() == Route::kWire ? ""
            : GetParam() == Route::kSharedMemory
                ? "payloads to shards 0, 1 go through shared memory"
                : "payloads to shards 0, 1 go through shared memory; pushes to "
                  "shards 0, 1 go through it too, without gRPC");
  EXPECT_EQ((*client)->shard_map().total_elements, n);
  ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
  EXPECT_EQ(params, init);

  const std::vector<float> g = Ramp(n, 0.25f);
  ASSERT_TRUE((*client)->Push(1, g, versions).ok());
  std::vector<float> after(n);
  std::vector<int64_t> after_versions;
  ASSERT_TRUE((*client)
                  ->PushPull(2, g, versions, absl::MakeSpan(after),
                             &after_versions, PullOptions())
                  .ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[i], init[i] - g[i] - g[i]) << i;
  for (int64_t v : after_versions) EXPECT_EQ(v, 2);

  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ((*stats)[s].shard_index, s);
    EXPECT_EQ((*stats)[s].pushes_applied, 2);
    EXPECT_EQ((*stats)[s].optimizer, "sgd");
  }
  EXPECT_TRUE((*client)->Leave().ok());
}

// A client of `hosts` (worker `worker`) with Layout(2) declared,
// initialized to *init (Ramp(n, 0.5f)), with payloads through shared memory
// or not.
std::unique_ptr<ParameterClient> DeclaredClient(
    const std::vector<std::unique_ptr<ParameterServerHost>>& hosts,
    int64_t part_bytes, std::vector<float>* init, Route route,
    int worker = 0) {
  GrpcClientOptions o;
  o.hosts = Addresses(hosts);
  o.worker_id = worker;
  o.part_bytes = part_bytes;
  SetRoute(route, &o);
  auto client = NewGrpcParameterClient(o);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  const ModelLayout layout = Layout(2);
  *init = Ramp(layout.NumElements(), 0.5f);
  const absl::Status s = (*client)->Declare(layout, *init);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? std::move(*client) : nullptr;
}

// A push in pieces (wait-free backpropagation): the parts above a break go
// first and the push counts once the rest arrived; with PushPull pieces,
// each brings its own values back.
TEST_P(PayloadsTest, PushInPiecesCountsOnceWhole) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  std::vector<float> init;
  std::unique_ptr<ParameterClient> client =
      DeclaredClient(hosts, /*part_bytes=*/4096, &init, GetParam());
  ASSERT_NE(client, nullptr);
  const int64_t n = static_cast<int64_t>(init.size());
  EXPECT_EQ(client->SetPushBreaks({5, 3}).code(),
            absl::StatusCode::kInvalidArgument);  // Not ascending.
  const int64_t brk = 64 * 33;  // "b" and "scalar" above it.
  ASSERT_TRUE(client->SetPushBreaks({brk}).ok());
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());

  const std::vector<float> g = Ramp(n, 0.25f);
  ASSERT_TRUE(client->PushFrom(1, g, versions, brk, nullptr).ok());
  ASSERT_TRUE(client->PushFrom(1, g, versions, brk, nullptr).ok());  // Again: nothing.
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  for (const ShardStats& s : *stats) EXPECT_EQ(s.pushes_applied, 0);
  std::vector<float> mid(n);
  std::vector<int64_t> mid_versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(mid), &mid_versions).ok());
  for (int64_t i = 0; i < n; ++i) {
    // Async applies each part as it comes: only the end has moved.
    ASSERT_EQ(mid[i], i >= brk ? init[i] - g[i] : init[i]) << i;
  }
  ASSERT_TRUE(client->PushFrom(1, g, versions, 0, nullptr).ok());
  stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  for (const ShardStats& s : *stats) EXPECT_EQ(s.pushes_applied, 1);

  std::vector<float> after(n);
  std::vector<int64_t> after_versions;
  const PulledValues pulled{absl::MakeSpan(after), &after_versions};
  ASSERT_TRUE(client->PushFrom(2, g, versions, brk, &pulled).ok());
  ASSERT_TRUE(client->PushFrom(2, g, versions, 0, &pulled).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[i], init[i] - g[i] - g[i]) << i;
  for (int64_t v : after_versions) EXPECT_EQ(v, 2);
}

// Calls of `method` the shards served, by their metrics.
double Calls(const std::vector<std::unique_ptr<ParameterServerHost>>& hosts,
             const std::string& method) {
  double sum = 0;
  for (const auto& h : hosts) {
    sum += MetricSum(ScrapeMetrics(h->metrics_port()),
                     "downpour_rpc_requests_total",
                     "method=\"" + method + "\"");
  }
  return sum;
}

// Sync: the end of a piecewise push carries the pull of each shard that has
// a part left in it (one PushPull whose reply waits for the step), pulls
// each shard that has none at once, and brings the step's values; a pull
// that waits for no step goes as Pull calls after the push.
TEST_P(PayloadsTest, SyncPushRestThenPullCarriesThePull) {
  auto hosts = StartShards(2, /*drop_reply_every=*/0, /*sync=*/true);
  ASSERT_EQ(hosts.size(), 2u);
  std::vector<float> init;
  // A shard's chunks on one side of the break: one part.
  std::unique_ptr<ParameterClient> client =
      DeclaredClient(hosts, /*part_bytes=*/1 << 20, &init, GetParam());
  ASSERT_NE(client, nullptr);
  const int64_t n = static_cast<int64_t>(init.size());
  const int64_t brk = 64 * 33;  // "b" and "scalar" above it.
  ASSERT_TRUE(client->SetPushBreaks({brk}).ok());
  const ShardMap& map = client->shard_map();
  // Shards with a part below the break carry their pull in it.
  std::vector<bool> below(2, false);
  for (const Chunk& c : map.chunks) {
    if (c.flat_offset < brk) below[c.shard] = true;
  }
  const int carried = static_cast<int>(below[0]) + static_cast<int>(below[1]);
  ASSERT_GE(carried, 1);
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());

  const std::vector<float> g = Ramp(n, 0.25f);
  double pulls = Calls(hosts, "Pull");
  double push_pulls = Calls(hosts, "PushPull");
  ASSERT_TRUE(client->PushFrom(1, g, versions, brk, nullptr).ok());
  std::vector<float> after(n);
  std::vector<int64_t> after_versions;
  std::atomic<int> arrived{0};
  PullOptions wait;
  wait.min_version = 1;
  wait.on_chunks = [&arrived](absl::Span<const int32_t> ids) {
    arrived += static_cast<int>(ids.size());
  };
  ASSERT_TRUE(client
                  ->PushRestThenPull(1, g, versions, absl::MakeSpan(after),
                                     &after_versions, wait)
                  .ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[i], init[i] - g[i]) << i;
  for (int64_t v : after_versions) EXPECT_EQ(v, 1);
  EXPECT_EQ(arrived.load(), static_cast<int>(map.chunks.size()));
  EXPECT_EQ(Calls(hosts, "PushPull") - push_pulls, carried);
  EXPECT_EQ(Calls(hosts, "Pull") - pulls, 2 - carried);
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  for (const ShardStats& s : *stats) EXPECT_EQ(s.steps, 1);

  // Without a step to wait for, the pull goes after the push, as Pull calls.
  pulls = Calls(hosts, "Pull");
  push_pulls = Calls(hosts, "PushPull");
  ASSERT_TRUE(client->PushFrom(2, g, after_versions, brk, nullptr).ok());
  ASSERT_TRUE(client
                  ->PushRestThenPull(2, g, after_versions,
                                     absl::MakeSpan(params), &versions,
                                     PullOptions())
                  .ok());
  EXPECT_EQ(Calls(hosts, "PushPull"), push_pulls);
  EXPECT_EQ(Calls(hosts, "Pull") - pulls, 2);
}

// Sync with early pulls: a shard whose last part goes before the push's
// end gets it as a PushPull then, its values come back with it, and the
// end of the push does not pull it again.
// The chunks a pull's on_chunks named, from whichever thread.
class Arrivals {
 public:
  PullOptions Options() {
    PullOptions o;
    o.min_version = 1;
    o.on_chunks = [this](absl::Span<const int32_t> ids) {
      absl::MutexLock l(&mu_);
      ids_.insert(ids.begin(), ids.end());
    };
    return o;
  }
  std::set<int32_t> ids() {
    absl::MutexLock l(&mu_);
    return ids_;
  }
  // Waits until every chunk of `shard` in `map` arrived (up to 60 s).
  bool WaitForShard(const ShardMap& map, int shard) {
    absl::MutexLock l(&mu_);
    const auto all_in = [&] {
      mu_.AssertHeld();  // Await calls it under mu_.
      for (const Chunk& c : map.chunks) {
        if (c.shard == shard && ids_.count(c.id) == 0) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all_in), absl::Seconds(60));
  }

 private:
  absl::Mutex mu_;
  std::set<int32_t> ids_ ABSL_GUARDED_BY(mu_);
};

// The break at the first chunk of the shard holding the model's end (*early):
// that shard is all above it, the other has chunks below.
int64_t BreakAboveOneShard(const ShardMap& map, int* early) {
  int64_t last = -1;
  for (const Chunk& c : map.chunks) {
    if (c.flat_offset > last) {
      last = c.flat_offset;
      *early = c.shard;
    }
  }
  int64_t brk = map.total_elements;
  for (const Chunk& c : map.chunks) {
    if (c.shard == *early) brk = std::min(brk, c.flat_offset);
  }
  bool other_below = false;
  for (const Chunk& c : map.chunks) {
    if (c.shard != *early && c.flat_offset < brk) other_below = true;
  }
  EXPECT_TRUE(other_below) << "the test layout puts every shard above";
  return brk;
}

TEST_P(PayloadsTest, SyncPushFromCarryingPullsPullsAShardEarly) {
  auto hosts = StartShards(2, /*drop_reply_every=*/0, /*sync=*/true);
  ASSERT_EQ(hosts.size(), 2u);
  std::vector<float> init;
  std::unique_ptr<ParameterClient> client =
      DeclaredClient(hosts, /*part_bytes=*/1 << 20, &init, GetParam());
  ASSERT_NE(client, nullptr);
  const int64_t n = static_cast<int64_t>(init.size());
  const ShardMap& map = client->shard_map();
  int early = 0;
  const int64_t brk = BreakAboveOneShard(map, &early);
  ASSERT_TRUE(client->SetPushBreaks({brk}).ok());
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());

  const std::vector<float> g = Ramp(n, 0.25f);
  const double pulls = Calls(hosts, "Pull");
  const double push_pulls = Calls(hosts, "PushPull");
  std::vector<float> after(n, -1.f);
  std::vector<int64_t> after_versions;
  Arrivals arrivals;
  const PullOptions wait = arrivals.Options();
  ASSERT_TRUE(client
                  ->PushFromCarryingPulls(1, g, versions, brk,
                                          absl::MakeSpan(after),
                                          &after_versions, wait)
                  .ok());
  // The early shard's values and versions come (this worker is the step's
  // only one); the other's do not.
  ASSERT_TRUE(arrivals.WaitForShard(map, early));
  EXPECT_EQ(Calls(hosts, "PushPull") - push_pulls, 1);
  for (const Chunk& c : map.chunks) {
    EXPECT_EQ(arrivals.ids().count(c.id), c.shard == early ? 1u : 0u) << c.id;
    if (c.shard != early) continue;
    EXPECT_EQ(after_versions[c.id], 1);
    for (int64_t i = c.flat_offset; i < c.flat_offset + c.num_elements; ++i) {
      ASSERT_EQ(after[i], init[i] - g[i]) << i;
    }
  }
  ASSERT_TRUE(client
                  ->PushRestThenPull(1, g, versions, absl::MakeSpan(after),
                                     &after_versions, wait)
                  .ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[i], init[i] - g[i]) << i;
  for (int64_t v : after_versions) EXPECT_EQ(v, 1);
  EXPECT_EQ(arrivals.ids().size(), map.chunks.size());
  // The other shard's last part carried its pull; nobody was pulled again.
  EXPECT_EQ(Calls(hosts, "PushPull") - push_pulls, 2);
  EXPECT_EQ(Calls(hosts, "Pull") - pulls, 0);
}

// A carried pull waits for the other workers' step on its shard; the rest
// of the push must not wait with it, or the other shards' steps would wait
// for this one's (and with a dead worker, take its timeout on top of their
// own).
TEST_P(PayloadsTest, SyncCarriedPullDoesNotHoldUpTheRestOfThePush) {
  auto hosts =
      StartShards(2, /*drop_reply_every=*/0, /*sync=*/true, /*workers=*/2);
  ASSERT_EQ(hosts.size(), 2u);
  std::vector<float> init;
  std::unique_ptr<ParameterClient> w0 =
      DeclaredClient(hosts, /*part_bytes=*/1 << 20, &init, GetParam(), 0);
  std::unique_ptr<ParameterClient> w1 =
      DeclaredClient(hosts, /*part_bytes=*/1 << 20, &init, GetParam(), 1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  const int64_t n = static_cast<int64_t>(init.size());
  const ShardMap& map = w0->shard_map();
  int early = 0;
  const int64_t brk = BreakAboveOneShard(map, &early);
  ASSERT_TRUE(w0->SetPushBreaks({brk}).ok());
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(w0->Pull(absl::MakeSpan(params), &versions).ok());

  const std::vector<float> g = Ramp(n, 0.25f);
  std::vector<float> after0(n, -1.f), after1(n, -1.f);
  std::vector<int64_t> versions0, versions1;
  Arrivals arrivals0, arrivals1;
  const PullOptions wait0 = arrivals0.Options(), wait1 = arrivals1.Options();
  // Worker 1 has pushed nothing: the early shard's step cannot end, yet the
  // call returns, with the part below the break sent.
  auto first = std::async(std::launch::async, [&] {
    return w0->PushFromCarryingPulls(1, g, versions, brk,
                                     absl::MakeSpan(after0), &versions0,
                                     wait0);
  });
  const bool returned =
      first.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the carried pull held up the rest of the push";
  EXPECT_TRUE(arrivals0.ids().empty());
  auto rest = std::async(std::launch::async, [&] {
    return w0->PushRestThenPull(1, g, versions, absl::MakeSpan(after0),
                                &versions0, wait0);
  });
  // Worker 1's whole step ends both shards' steps.
  ASSERT_TRUE(w1->PushRestThenPull(1, g, versions, absl::MakeSpan(after1),
                                   &versions1, wait1)
                  .ok());
  ASSERT_TRUE(first.get().ok());
  ASSERT_TRUE(rest.get().ok());
  EXPECT_EQ(arrivals0.ids().size(), map.chunks.size());
  EXPECT_EQ(after0, after1);
  EXPECT_NE(after0, init);
  for (int64_t v : versions0) EXPECT_EQ(v, 1);
  for (int64_t v : versions1) EXPECT_EQ(v, 1);
}

TEST(GrpcParameterClientTest, OptionsAreChecked) {
  GrpcClientOptions o;
  EXPECT_EQ(NewGrpcParameterClient(o).status().code(),
            absl::StatusCode::kInvalidArgument);  // No hosts.
  o.hosts = {"localhost"};
  EXPECT_EQ(NewGrpcParameterClient(o).status().code(),
            absl::StatusCode::kInvalidArgument);  // Not host:port.
  o.hosts = {"127.0.0.1:1"};
  o.part_bytes = 100;
  EXPECT_EQ(NewGrpcParameterClient(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.part_bytes = 1 << 20;
  o.connections_per_shard = 65;
  EXPECT_EQ(NewGrpcParameterClient(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.connections_per_shard = 0;
  o.security.mode = static_cast<TransportSecurityOptions::Mode>(42);
  EXPECT_EQ(NewGrpcParameterClient(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.security = TransportSecurityOptions();
  EXPECT_TRUE(NewGrpcParameterClient(o).ok());  // Nothing is dialled yet.
}

TEST(GrpcParameterClientTest, ServersListedInTheWrongOrderAreRefused) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  GrpcClientOptions o;
  o.hosts = {hosts[1]->address(), hosts[0]->address()};
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok());
  const ModelLayout layout = Layout(2);
  const absl::Status s = (*client)->Declare(
      layout, std::vector<float>(layout.NumElements(), 0.0f));
  // The server refuses chunks it does not hold (or, for a declaration
  // without values, the client sees the shard index it reports).
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard 1"), std::string::npos) << s;
}

// fp16/bf16 on the wire keep every payload in the messages, and say why.
TEST(GrpcParameterClientTest, CompressedPayloadsStayOnTheWire) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  GrpcClientOptions o;
  o.hosts = Addresses(hosts);
  o.push_encoding = wire::Encoding::kBf16;
  std::string note;
  o.on_note = [&note](const std::string& m) { note = m; };
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok());
  const ModelLayout layout = Layout(2);
  const int64_t n = layout.NumElements();
  ASSERT_TRUE((*client)->Declare(layout, Ramp(n, 0.5f)).ok());
  EXPECT_EQ(note, "payloads go over gRPC, not shared memory: fp16/bf16 on "
                  "the wire asked for");
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
  EXPECT_EQ(params, Ramp(n, 0.5f));
}

// Through shared memory, a push may take its gradient from the client's
// push area itself (ParameterClient::PushStaging), and gives the same
// result as from any other buffer.
TEST_P(PayloadsTest, PushesFromTheStagingBuffer) {
  auto hosts = StartShards(2);
  ASSERT_EQ(hosts.size(), 2u);
  std::vector<float> init;
  std::unique_ptr<ParameterClient> client =
      DeclaredClient(hosts, /*part_bytes=*/4096, &init, GetParam());
  ASSERT_NE(client, nullptr);
  float* staging = client->PushStaging();
  if (GetParam() == Route::kWire) {
    EXPECT_EQ(staging, nullptr);
    return;
  }
  ASSERT_NE(staging, nullptr);
  const int64_t n = static_cast<int64_t>(init.size());
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE(client->Pull(absl::MakeSpan(params), &versions).ok());
  const std::vector<float> g = Ramp(n, 0.25f);
  std::copy(g.begin(), g.end(), staging);
  std::vector<float> after(n);
  std::vector<int64_t> after_versions;
  ASSERT_TRUE(client
                  ->PushPull(1, absl::MakeConstSpan(staging, n), versions,
                             absl::MakeSpan(after), &after_versions,
                             PullOptions())
                  .ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[i], init[i] - g[i]) << i;
}

// Every other reply is lost after its request took effect: the client's
// retries still leave each push applied exactly once.
TEST_P(PayloadsTest, RetriesOfDroppedRepliesApplyOnce) {
  auto hosts = StartShards(2, /*drop_reply_every=*/2);
  ASSERT_EQ(hosts.size(), 2u);
  GrpcClientOptions o;
  o.hosts = Addresses(hosts);
  o.part_bytes = 4096;
  SetRoute(GetParam(), &o);
  auto client = NewGrpcParameterClient(o);
  ASSERT_TRUE(client.ok());
  const ModelLayout layout = Layout(2);
  const int64_t n = layout.NumElements();
  ASSERT_TRUE((*client)->Declare(layout, std::vector<float>(n, 0.0f)).ok());
  std::vector<float> params(n);
  std::vector<int64_t> versions;
  ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
  constexpr int kPushes = 5;
  for (int seq = 1; seq <= kPushes; ++seq) {
    ASSERT_TRUE(
        (*client)->Push(seq, std::vector<float>(n, -1.0f), versions).ok());
  }
  ASSERT_TRUE((*client)->Pull(absl::MakeSpan(params), &versions).ok());
  for (float x : params) ASSERT_EQ(x, static_cast<float>(kPushes));
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok());
  int64_t duplicates = 0;
  for (const ShardStats& s : *stats) duplicates += s.pushes_duplicate;
  EXPECT_GT(duplicates, 0);
}

}  // namespace
}  // namespace downpour
