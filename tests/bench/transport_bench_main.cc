// transport_bench: how much of this machine's bandwidth Downpour's transport
// and server apply path use, measured in one run so the ratios are fair.
//
//   bazel run -c opt //tests/bench:transport_bench -- --quick   # ~20 s smoke run
//   bazel run -c opt //tests/bench:transport_bench              # full, < 3 min
//
// Sections:
//  (a) push+pull goodput through the real gRPC stack: S in-process shards
//      (ParameterStore + NewParameterServerService + grpc::Server on loopback
//      TCP, see inprocess_cluster.h) and W worker threads, each with its own
//      NewGrpcParameterClient (and its own TCP connections), on a model of one
//      big tensor. Goodput = (bytes pushed + bytes pulled) / wall time, summed
//      over workers. Zero gradients with SGD at a tiny rate keep values fixed.
//      Also p50/p99 latency of 4 KB pulls and pushes (1024 floats, 1 shard).
//  (b) raw loopback TCP bandwidth (plain sockets, two threads): the ceiling.
//  (h) the headline cell (64 MB, 2 shards, 1 worker) run in trials that
//      alternate with raw TCP trials; goodput_vs_tcp is its best trial over
//      the best TCP trial of the whole run (median over median printed too).
//  (c) server apply rate: ParameterStore::Push in-process (validation + the
//      optimizer), and Optimizer::Apply alone, vs memcpy of the same bytes.
//  (d) where a 64 MB push/pull spends its time outside the network: the
//      server's parse into payload ranges and its apply from them, the
//      pull's references to the store's buffers, and the client's copy into
//      the flat vector; each stage timed alone.
// Ends with one line of JSON (bandwidths in Gbit/s = 1e9 bit/s).
// Order of a run: (b), (h), (a), (c), (d), (b) once more.
//
// The numbers include everything the process does: on a machine with few
// cores, clients, servers and the kernel's TCP share them, as they would with
// ps_server processes on the same host.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/sharding.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.pb.h"
#include "server/optimizer.h"
#include "server/parameter_store.h"
#include "tests/bench/inprocess_cluster.h"
#include "tests/bench/loopback_tcp.h"
#include "worker/grpc_ps_client.h"
#include "common/malloc_tuning.h"
#include "rpc/wire.h"
#include "tests/bench/security_cost.h"  // Security and operations.

// Every tunable of the benchmark. 0 / empty means "the profile's default"
// (the full profile, or the --quick one).
ABSL_FLAG(bool, quick, false,
          "Smoke profile (~20 s): fewer sizes and cells, fewer bytes.");
ABSL_FLAG(std::string, sizes_mb, "",
          "Model sizes in MiB for (a). Full: 1,16,64,256. Quick: 1,64.");
ABSL_FLAG(std::string, shards, "", "Shard counts for (a). Full: 1,2,4. Quick: 1,2.");
ABSL_FLAG(std::string, workers, "", "Concurrent workers for (a). Default 1,4.");
ABSL_FLAG(int64_t, cell_mb, 0,
          "Target MiB moved (push + pull, all workers) per (a) cell; rounds "
          "are derived from it. Full: 1536. Quick: 256.");
ABSL_FLAG(int, min_rounds, 0, "Fewest timed rounds per cell. Default 2.");
ABSL_FLAG(int, max_rounds, 0, "Most timed rounds per cell. Default 50.");
ABSL_FLAG(int64_t, max_chunk_bytes, 1 << 20,
          "Layout max_chunk_bytes (ps_worker's default is 1 MiB).");
ABSL_FLAG(int64_t, part_kb, downpour::GrpcClientOptions().part_bytes >> 10,
          "Client part size (KiB): payload of one call.");
ABSL_FLAG(int, connections_per_shard,
          downpour::GrpcClientOptions().connections_per_shard,
          "Client TCP connections per shard.");
ABSL_FLAG(int, calls_in_flight,
          downpour::GrpcClientOptions().max_calls_in_flight_per_connection,
          "Calls in flight per connection (GrpcClientOptions::"
          "max_calls_in_flight_per_connection); 0: no limit.");
ABSL_FLAG(bool, push_pull, true,
          "A round is one ParameterClient::PushPull, as an async worker's "
          "exchange is; false: a Pull, then a Push.");
ABSL_FLAG(int64_t, streaming_pull_min_mb, 32,
          "Pulls into parameter vectors of at least this many MiB write them "
          "with non-temporal stores (GrpcClientOptions::"
          "streaming_pull_min_bytes); -1: never.");
ABSL_FLAG(std::string, wire_encoding, "f32",
          "Payload encoding in (a): f32, fp16 or bf16 (goodput counts the "
          "float32 bytes the worker moves).");
ABSL_FLAG(bool, separate_connections, true,
          "Give each worker its own TCP connections (distinct loopback "
          "addresses); false lets gRPC share one connection per shard.");
ABSL_FLAG(int, latency_ops, 0, "Timed 4 KB pulls (and pushes). Full: 2000. Quick: 300.");
ABSL_FLAG(int64_t, tcp_mb, 0,
          "MiB sent over raw loopback TCP per trial (3 at the start, 1 at the "
          "end). Full: 1024. Quick: 256.");
ABSL_FLAG(int64_t, tcp_write_kb, 4096, "Bytes per send()/recv() call, KiB.");
ABSL_FLAG(int, headline_trials, 0,
          "Trials of the headline cell (64 MB, 2 shards, 1 worker), each "
          "after a raw TCP trial. Full: 5. Quick: 3.");
ABSL_FLAG(int64_t, headline_mb, 0,
          "MiB moved per headline trial. Full: 512. Quick: 256.");
ABSL_FLAG(int64_t, apply_mb, 64, "Gradient size for (c) and (d), MiB.");
ABSL_FLAG(int, apply_rounds, 0, "Timed repetitions in (c) and (d). Full: 10. Quick: 3.");
// Security and operations (tests/bench/security_cost.h): the TLS mode.
ABSL_FLAG(bool, security_cost, false,
          "Only the 64 MiB, 2-shard, 1-worker goodput cell with plaintext, "
          "token, mTLS and mTLS + token, side by side (--headline_trials each).");
ABSL_FLAG(std::string, certs_dir, "",
          "--security_cost: make_certs.sh's files (default: made now in a "
          "temporary directory with deploy/make_certs.sh).");

namespace downpour {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMiB = int64_t{1} << 20;

// The benchmark's settings, built from the flags in main.
struct BenchOptions {
  std::vector<int64_t> sizes_mb;
  std::vector<int> shards;
  std::vector<int> workers;
  int64_t cell_bytes = 0;
  int min_rounds = 2;
  int max_rounds = 50;
  int64_t max_chunk_bytes = kMiB;
  int64_t part_bytes = 0;
  int connections_per_shard = 0;
  int calls_in_flight = 0;
  bool push_pull = true;
  int64_t streaming_pull_min_bytes = 32 * kMiB;
  wire::Encoding encoding = wire::Encoding::kRawF32;
  bool separate_connections = true;
  int latency_ops = 0;
  int64_t tcp_bytes = 0;
  int64_t tcp_write_bytes = 4 * kMiB;
  int64_t apply_bytes = 64 * kMiB;
  int apply_rounds = 0;
  int headline_trials = 5;
  int64_t headline_bytes = 512 * kMiB;
  bool quick = false;  // Only reported.
  TransportSecurityOptions security;  // Of clients and servers.
};

// Written by timed code so the compiler cannot drop it.
volatile char g_sink = 0;

// CPU time (all threads) and minor page faults of this process so far.
struct Usage {
  double user_s = 0;
  double sys_s = 0;
  int64_t minor_faults = 0;
};

Usage GetUsage() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  Usage u;
  u.user_s = r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6;
  u.sys_s = r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6;
  u.minor_faults = r.ru_minflt;
  return u;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Gbps(double bytes_per_second) { return bytes_per_second * 8 / 1e9; }
double GBps(double bytes_per_second) { return bytes_per_second / 1e9; }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  return v[i];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// "4.81, 3.95, ..." in GB/s.
std::string JoinGBps(const std::vector<double>& bytes_per_second) {
  return absl::StrJoin(bytes_per_second, ", ", [](std::string* out, double b) {
    absl::StrAppendFormat(out, "%.2f", GBps(b));
  });
}

std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  return absl::StrFormat("%.2f %.2f %.2f", load[0], load[1], load[2]);
}

ModelLayout OneTensorLayout(int64_t floats, int shards, int64_t max_chunk_bytes) {
  ModelLayout layout;
  layout.tensors = {{"w", {floats}}};
  layout.num_shards = shards;
  layout.max_chunk_bytes = max_chunk_bytes;
  return layout;
}

OptimizerOptions TinySgd() {
  OptimizerOptions o;
  o.name = "sgd";
  o.learning_rate = 1e-6f;
  return o;
}

// ---------------------------------------------------------------- (a) ----

struct GoodputCell {
  int64_t model_bytes = 0;
  int shards = 0;
  int workers = 0;
  int rounds = 0;
  std::string refused;  // Non-empty: why there is no number.
  double seconds = 0;
  double goodput = 0;         // Bytes pushed + pulled per second, all workers.
  std::vector<double> trial_goodput;  // The same, per trial.
  double pull_mean_s = 0;     // One worker's Pull, mean over rounds and workers.
  double push_mean_s = 0;     // Push, or the whole PushPull with --push_pull.
  // Whole process (clients, servers, gRPC threads) during the timed rounds.
  double cpu_s_per_gb = 0;    // User + system CPU seconds per GB moved.
  double sys_fraction = 0;    // Share of that CPU time spent in the kernel.
  double faults_per_mb = 0;   // Minor page faults per MiB moved.
};

std::string Describe(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kResourceExhausted) {
    return "refused (message limit)";
  }
  return absl::StrCat("failed: ", s.ToString());
}

// Runs `trials` timed trials of cell.rounds rounds each on one cluster;
// `between_trials` (if set) runs before each trial while the workers wait, so
// another measurement can be interleaved with this cell's.
GoodputCell RunGoodputCell(const BenchOptions& o, int64_t model_bytes,
                           int shards, int workers, int trials = 1,
                           const std::function<void()>& between_trials = {}) {
  GoodputCell cell;
  cell.model_bytes = model_bytes;
  cell.shards = shards;
  cell.workers = workers;
  cell.rounds = static_cast<int>(std::clamp<int64_t>(
      o.cell_bytes / (2 * model_bytes * workers), o.min_rounds, o.max_rounds));

  InProcessClusterOptions cluster_options;
  cluster_options.num_shards = shards;
  cluster_options.optimizer = TinySgd();
  cluster_options.num_addresses = o.separate_connections ? workers : 1;
  cluster_options.security = o.security;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) {
    cell.refused = Describe(cluster.status());
    return cell;
  }
  const int64_t n = model_bytes / 4;
  const ModelLayout layout = OneTensorLayout(n, shards, o.max_chunk_bytes);

  std::vector<std::unique_ptr<ParameterClient>> clients;
  {
    const std::vector<float> initial(n, 0.5f);
    for (int w = 0; w < workers; ++w) {
      GrpcClientOptions client_options;
      client_options.hosts = (*cluster)->HostsForClient(w);
      client_options.worker_id = w;
      client_options.rpc_timeout = absl::Seconds(120);
      client_options.connect_timeout = absl::Seconds(10);
      client_options.max_attempts = 1;  // A benchmark reports, never retries.
      client_options.part_bytes = o.part_bytes;
      client_options.connections_per_shard = o.connections_per_shard;
      client_options.max_calls_in_flight_per_connection = o.calls_in_flight;
      client_options.streaming_pull_min_bytes = o.streaming_pull_min_bytes;
      client_options.push_encoding = o.encoding;
      client_options.pull_encoding = o.encoding;
      client_options.security = o.security;
      absl::StatusOr<std::unique_ptr<ParameterClient>> client =
          NewGrpcParameterClient(client_options);
      absl::Status s = client.status();
      if (s.ok()) s = (*client)->Declare(layout, initial);
      if (!s.ok()) {
        cell.refused = Describe(s);
        return cell;
      }
      clients.push_back(std::move(client).value());
    }
  }

  const std::vector<float> zeros(n, 0.0f);  // Shared, read-only.
  std::vector<absl::Status> status(workers);
  std::vector<double> pull_s(workers, 0), push_s(workers, 0);
  std::vector<std::vector<float>> params(workers, std::vector<float>(n));
  std::vector<std::vector<int64_t>> versions(workers);
  std::vector<int64_t> seq(workers, 1);
  // One untimed round: connections warm, buffers allocated, pages touched.
  for (int w = 0; w < workers; ++w) {
    absl::Status s = clients[w]->Pull(absl::MakeSpan(params[w]), &versions[w]);
    if (s.ok()) s = clients[w]->Push(seq[w]++, zeros, versions[w]);
    if (!s.ok()) {
      cell.refused = Describe(s);
      return cell;
    }
  }
  Usage used;  // Summed over the trials only.
  for (int t = 0; t < trials; ++t) {
    if (between_trials) between_trials();
    // Every value the trial pulls must arrive: poison the vectors first.
    for (std::vector<float>& p : params) std::fill(p.begin(), p.end(), -1.0f);
    const Usage trial_usage_start = GetUsage();
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        ParameterClient& client = *clients[w];
        absl::Status s;
        for (int r = 0; r < cell.rounds && s.ok(); ++r) {
          const Clock::time_point t0 = Clock::now();
          if (o.push_pull) {
            s = client.PushPull(seq[w]++, zeros, versions[w],
                                absl::MakeSpan(params[w]), &versions[w],
                                PullOptions());
            push_s[w] += SecondsSince(t0);
            continue;
          }
          s = client.Pull(absl::MakeSpan(params[w]), &versions[w]);
          const Clock::time_point t1 = Clock::now();
          if (s.ok()) s = client.Push(seq[w]++, zeros, versions[w]);
          pull_s[w] += std::chrono::duration<double>(t1 - t0).count();
          push_s[w] += SecondsSince(t1);
        }
        status[w] = s;
      });
    }
    for (std::thread& th : threads) th.join();
    const double seconds = SecondsSince(start);
    const Usage trial_usage_end = GetUsage();
    for (const absl::Status& s : status) {
      if (!s.ok()) {
        cell.refused = Describe(s);
        return cell;
      }
    }
    // Zero gradients leave the initial 0.5 everywhere.
    for (const std::vector<float>& p : params) {
      const auto wrong = std::find_if(p.begin(), p.end(),
                                      [](float v) { return v != 0.5f; });
      if (wrong != p.end()) {
        cell.refused = absl::StrCat("pulled value ", *wrong, " at index ",
                                    wrong - p.begin(), ", expected 0.5");
        return cell;
      }
    }
    cell.seconds += seconds;
    cell.trial_goodput.push_back(2.0 * model_bytes * workers * cell.rounds /
                                 seconds);
    used.user_s += trial_usage_end.user_s - trial_usage_start.user_s;
    used.sys_s += trial_usage_end.sys_s - trial_usage_start.sys_s;
    used.minor_faults +=
        trial_usage_end.minor_faults - trial_usage_start.minor_faults;
  }
  const double moved = 2.0 * model_bytes * workers * cell.rounds * trials;
  cell.goodput = moved / cell.seconds;
  const double user = used.user_s;
  const double sys = used.sys_s;
  cell.cpu_s_per_gb = (user + sys) / (moved / 1e9);
  cell.sys_fraction = user + sys > 0 ? sys / (user + sys) : 0;
  cell.faults_per_mb =
      used.minor_faults / (moved / kMiB);
  double pull_total = 0, push_total = 0;
  for (int w = 0; w < workers; ++w) {
    pull_total += pull_s[w];
    push_total += push_s[w];
  }
  cell.pull_mean_s = pull_total / (workers * cell.rounds * trials);
  cell.push_mean_s = push_total / (workers * cell.rounds * trials);
  return cell;
}

struct LatencyResult {
  std::string error;
  int ops = 0;
  double pull_p50_us = 0, pull_p99_us = 0, pull_mean_us = 0;
  double push_p50_us = 0, push_p99_us = 0;
};

LatencyResult RunSmallLatency(const BenchOptions& o) {
  LatencyResult result;
  result.ops = o.latency_ops;
  InProcessClusterOptions cluster_options;
  cluster_options.optimizer = TinySgd();
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) {
    result.error = cluster.status().ToString();
    return result;
  }
  GrpcClientOptions client_options;
  client_options.hosts = (*cluster)->HostsForClient(0);
  client_options.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      NewGrpcParameterClient(client_options);
  constexpr int64_t kFloats = 1024;  // 4 KB.
  std::vector<float> params(kFloats, 0.5f);
  const std::vector<float> zeros(kFloats, 0.0f);
  std::vector<int64_t> versions;
  absl::Status s = client.status();
  if (s.ok()) {
    s = (*client)->Declare(OneTensorLayout(kFloats, 1, o.max_chunk_bytes), params);
  }
  std::vector<double> pulls, pushes;
  int64_t seq = 1;
  for (int i = -50; i < o.latency_ops && s.ok(); ++i) {  // 50 warm-up calls.
    Clock::time_point t = Clock::now();
    s = (*client)->Pull(absl::MakeSpan(params), &versions);
    if (i >= 0) pulls.push_back(SecondsSince(t) * 1e6);
    if (!s.ok()) break;
    t = Clock::now();
    s = (*client)->Push(seq++, zeros, versions);
    if (i >= 0) pushes.push_back(SecondsSince(t) * 1e6);
  }
  if (!s.ok()) {
    result.error = s.ToString();
    return result;
  }
  result.pull_p50_us = Percentile(pulls, 0.5);
  result.pull_p99_us = Percentile(pulls, 0.99);
  double sum = 0;
  for (double x : pulls) sum += x;
  result.pull_mean_us = pulls.empty() ? 0 : sum / pulls.size();
  result.push_p50_us = Percentile(pushes, 0.5);
  result.push_p99_us = Percentile(pushes, 0.99);
  return result;
}

// ---------------------------------------------------------------- (c) ----

// Median seconds of `rounds` runs of fn() after one untimed run.
template <typename Fn>
double MedianSeconds(int rounds, Fn fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const Clock::time_point start = Clock::now();
    fn();
    t.push_back(SecondsSince(start));
  }
  return Median(t);
}

double MeasureMemcpy(int64_t bytes, int rounds) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  volatile char sink = 0;
  const double s = MedianSeconds(rounds, [&] {
    std::memcpy(dst.data(), src.data(), bytes);
    sink = dst[bytes / 2];
  });
  (void)sink;
  return bytes / s;
}

struct ApplyResult {
  std::string optimizer;
  std::string error;
  double store_push = 0;      // Gradient bytes/s through ParameterStore::Push.
  double optimizer_only = 0;  // Gradient bytes/s through Optimizer::Apply.
};

ApplyResult MeasureApply(const std::string& name, int64_t bytes, int rounds) {
  ApplyResult result;
  result.optimizer = name;
  const int64_t n = bytes / 4;
  OptimizerOptions opt;
  opt.name = name;
  opt.learning_rate = 1e-6f;

  // Optimizer alone: one pass over params, state and gradient.
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(opt);
  if (!optimizer.ok()) {
    result.error = optimizer.status().ToString();
    return result;
  }
  {
    std::vector<float> params(n, 0.5f), grads(n, 0.0f);
    std::vector<float> state(n * (*optimizer)->StateSize(),
                             (*optimizer)->InitialState());
    result.optimizer_only = bytes / MedianSeconds(rounds, [&] {
      (*optimizer)->Apply(n, grads.data(), 1.0f, params.data(), state.data());
    });
  }

  // The store: validation (ids, sizes, finiteness), locks, versions, apply.
  ParameterStoreOptions store_options;
  store_options.optimizer = opt;
  absl::StatusOr<std::unique_ptr<ParameterStore>> store =
      ParameterStore::Create(store_options);
  absl::Status s = store.status();
  const ModelLayout layout = OneTensorLayout(n, 1, kMiB);
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  if (s.ok()) s = map.status();
  const std::vector<float> init(n, 0.5f), grads(n, 0.0f);
  auto chunk_bytes = [&](const std::vector<float>& v) {
    std::vector<ChunkBytes> out;
    for (const Chunk& c : map->chunks) {
      out.push_back({c.id, 0, v.data() + c.flat_offset, c.num_elements * 4});
    }
    return out;
  };
  if (s.ok()) s = (*store)->Declare(layout, chunk_bytes(init)).status();
  if (!s.ok()) {
    result.error = s.ToString();
    return result;
  }
  const std::vector<ChunkBytes> g = chunk_bytes(grads);
  int64_t seq = 1;
  absl::Status push_status;
  const double t = MedianSeconds(rounds, [&] {
    absl::StatusOr<PushResult> r = (*store)->Push(0, seq++, g);
    if (!r.ok()) push_status = r.status();
  });
  if (!push_status.ok()) {
    result.error = push_status.ToString();
    return result;
  }
  result.store_push = bytes / t;
  return result;
}

// ---------------------------------------------------------------- (d) ----

struct Stage {
  std::string name;
  double bytes_per_second = 0;
  double seconds = 0;
};

// Each stage of one shard's 64 MB push and pull that happens in user space,
// timed alone (median), in the order the bytes go through them.
// The client's gather is timed with both kinds of stores; the kind a client
// with `streaming_pull_min_bytes` uses at this size counts in the sums, the
// other is shown for comparison.
std::vector<Stage> MeasureCopyStages(int64_t bytes, int rounds,
                                     int64_t streaming_pull_min_bytes,
                                     std::string* error) {
  std::vector<Stage> stages;
  const int64_t n = bytes / 4;
  const ModelLayout layout = OneTensorLayout(n, 1, kMiB);
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  ParameterStoreOptions store_options;
  store_options.optimizer = TinySgd();
  absl::StatusOr<std::unique_ptr<ParameterStore>> store =
      ParameterStore::Create(store_options);
  if (!map.ok() || !store.ok()) {
    *error = !map.ok() ? map.status().ToString() : store.status().ToString();
    return stages;
  }
  const std::vector<float> init(n, 0.5f), grads(n, 0.0f);
  std::vector<ChunkBytes> initial;
  for (const Chunk& c : map->chunks) {
    initial.push_back({c.id, 0, init.data() + c.flat_offset, c.num_elements * 4});
  }
  if (absl::Status s = (*store)->Declare(layout, initial).status(); !s.ok()) {
    *error = s.ToString();
    return stages;
  }
  auto add = [&](const std::string& name, double seconds) {
    stages.push_back({name, bytes / seconds, seconds});
  };

  // Baseline: what any fresh buffer of this size costs before use (malloc
  // hands large blocks out as new mmap'd pages; each 4 KB page faults).
  add("baseline: first touch of a fresh allocation",
      MedianSeconds(rounds, [&] {
        std::unique_ptr<char[]> fresh(new char[bytes]);
        std::memset(fresh.get(), 1, bytes);
        g_sink = fresh[bytes / 3];
      }));

  // The stages of the real path (server/grpc_service.cc,
  // worker/grpc_ps_client.cc). A received message arrives as slices; cut it
  // into 256 KiB pieces at odd offsets, as a TCP reader would.
  std::string message;
  {
    wire::PutVarintField(1, 0, &message);
    wire::PutVarintField(2, 1, &message);
    for (const Chunk& c : map->chunks) {
      message += wire::ChunkHeader(3, c.id, 0, wire::Encoding::kRawF32,
                                   c.num_elements * 4);
      message.append(reinterpret_cast<const char*>(grads.data() + c.flat_offset),
                     c.num_elements * 4);
    }
  }
  wire::Pieces pieces;
  for (size_t at = 0; at < message.size(); at += (256 << 10) + 3) {
    pieces.push_back(absl::string_view(message).substr(at, (256 << 10) + 3));
  }
  // Push, server side (server/grpc_service.cc): parse, take each payload as
  // ranges of the received pieces (no gather), then the store validates and
  // applies straight from them.
  std::vector<ChunkBytes> views;
  std::vector<absl::string_view> ranges;
  add("push: server parses slices into payload ranges (no gather)",
      MedianSeconds(rounds, [&] {
        absl::StatusOr<wire::PushMessage> m = wire::ParsePushRequest(pieces);
        const std::vector<absl::Span<const absl::string_view>> payload =
            wire::PayloadRanges(pieces, m->chunks, &ranges);
        views.clear();
        for (size_t i = 0; i < m->chunks.size(); ++i) {
          views.push_back({m->chunks[i].chunk_id, 0, nullptr,
                           m->chunks[i].data.size, payload[i]});
        }
      }));
  int64_t seq = 1;
  add("push: ParameterStore::Push from the pieces (validate + sgd)",
      MedianSeconds(rounds, [&] { (void)(*store)->Push(0, seq++, views); }));

  // Pull, server side: a reference to each chunk's copy-on-write buffer is
  // taken under its lock; gRPC sends from it (no copy).
  std::vector<ChunkView> held;
  add("pull: server takes references to chunk buffers (Pull, no copy)",
      MedianSeconds(rounds, [&] {
        held.clear();
        (void)(*store)->Pull({}, [&](const ChunkView& c) { held.push_back(c); });
      }));
  held.clear();
  std::vector<float> params(n);
  absl::StatusOr<std::vector<wire::WireChunk>> pulled;
  {
    std::string resp;
    for (const Chunk& c : map->chunks) {
      resp += wire::ChunkHeader(1, c.id, 0, wire::Encoding::kRawF32,
                                c.num_elements * 4);
      resp.append(reinterpret_cast<const char*>(init.data() + c.flat_offset),
                  c.num_elements * 4);
    }
    message.swap(resp);
    pieces.clear();
    for (size_t at = 0; at < message.size(); at += (256 << 10) + 3) {
      pieces.push_back(absl::string_view(message).substr(at, (256 << 10) + 3));
    }
  }
  const wire::Store used = wire::StoreFor(bytes, streaming_pull_min_bytes);
  for (const wire::Store store : {wire::Store::kCached, wire::Store::kStreaming}) {
    const std::string kind =
        store == wire::Store::kCached ? "cached stores" : "streaming stores";
    add(store == used
            ? absl::StrCat("pull: client parses slices, gathers (", kind, ")")
            : absl::StrCat("  not used at this size: the gather with ", kind),
        MedianSeconds(rounds, [&] {
          pulled = wire::ParsePullResponse(pieces);
          std::string bytes_scratch;
          for (const wire::WireChunk& c : *pulled) {
            (void)wire::DecodeInto(
                pieces, c, params.data() + map->chunks[c.chunk_id].flat_offset,
                c.data.size / 4, &bytes_scratch, store);
          }
        }));
  }
  return stages;
}

// --------------------------------------------------------------- main ----

// Security and operations: --security_cost. The 64 MiB, 2-shard, 1-worker
// cell (section (h)'s) with each security setting, trials interleaved.
int RunSecurityCostMode(BenchOptions o) {
  std::string dir = absl::GetFlag(FLAGS_certs_dir);
  if (dir.empty()) {
    char tmpl[] = "/tmp/downpour-bench-certs-XXXXXX";
    dir = mkdtemp(tmpl) != nullptr ? tmpl : "";
    const std::string cmd = absl::StrCat("bash deploy/make_certs.sh ", dir, " >/dev/null");
    if (dir.empty() || std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "transport_bench: `%s` failed; pass --certs_dir\n", cmd.c_str());
      return 1;
    }
  }
  auto settings = RunSecurityCost(dir, o.headline_trials, [&](const TransportSecurityOptions& s)
      -> absl::StatusOr<double> {
    o.security = s;
    GoodputCell cell = RunGoodputCell(o, 64 * kMiB, 2, 1);
    if (!cell.refused.empty()) return absl::InternalError(cell.refused);
    return cell.goodput;
  });
  if (!settings.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", settings.status().ToString().c_str());
    return 1;
  }
  std::printf("security cost: push+pull goodput, 64 MiB, 2 shards, 1 worker, %d "
              "trials of %d rounds per setting (load %s)\n%s", o.headline_trials,
              static_cast<int>(std::clamp<int64_t>(o.cell_bytes / (2 * 64 * kMiB),
                                                   o.min_rounds, o.max_rounds)),
              LoadAverage().c_str(), SecurityCostTable(*settings).c_str());
  return 0;
}

int Run(const BenchOptions& o) {
  const Clock::time_point t_begin = Clock::now();
  const std::string load_before = LoadAverage();
  std::printf("transport_bench: %u hardware threads, load average %s (1/5/15 min)\n",
              std::thread::hardware_concurrency(), load_before.c_str());
  std::printf("Units: GB/s = 1e9 bytes/s; Gbit/s = 1e9 bits/s. 1 MB model = 1 MiB.\n\n");
  std::fflush(stdout);

  // (b) first: it is the reference for everything else. Best of three
  // trials, and one more at the end; other load on the machine only ever
  // lowers a trial, so the best is the closest to what the machine can do.
  LoopbackTcpOptions tcp_options;
  tcp_options.total_bytes = o.tcp_bytes;
  tcp_options.write_bytes = o.tcp_write_bytes;
  double tcp_bps = 0;
  std::vector<std::string> tcp_trials;
  double tcp_cpu_s = 0, tcp_sys_s = 0, tcp_gb = 0;
  auto tcp_trial = [&]() -> double {
    const Usage before = GetUsage();
    absl::StatusOr<LoopbackTcpResult> r = MeasureLoopbackTcp(tcp_options);
    const Usage after = GetUsage();
    tcp_sys_s += after.sys_s - before.sys_s;
    tcp_cpu_s += after.user_s - before.user_s + after.sys_s - before.sys_s;
    if (!r.ok()) {
      tcp_trials.push_back(absl::StrCat("FAILED: ", r.status().ToString()));
      return 0;
    }
    tcp_trials.push_back(absl::StrFormat("%.2f", GBps(r->bytes_per_second)));
    tcp_gb += r->bytes / 1e9;
    tcp_bps = std::max(tcp_bps, r->bytes_per_second);
    return r->bytes_per_second;
  };
  for (int i = 0; i < 3; ++i) tcp_trial();
  std::printf("(b) raw loopback TCP, %lld MiB in %lld KiB writes, best of 3: "
              "%.2f GB/s (%.1f Gbit/s); trials %s GB/s; %.2f CPU s per GB, "
              "%.0f%% of it in the kernel\n\n",
              static_cast<long long>(o.tcp_bytes / kMiB),
              static_cast<long long>(o.tcp_write_bytes >> 10), GBps(tcp_bps),
              Gbps(tcp_bps), absl::StrJoin(tcp_trials, ", ").c_str(),
              tcp_gb > 0 ? tcp_cpu_s / tcp_gb : 0.0,
              tcp_cpu_s > 0 ? 100 * tcp_sys_s / tcp_cpu_s : 0.0);
  std::fflush(stdout);

  // (h) the headline cell (64 MB, 2 shards, 1 worker) in trials interleaved
  // with raw TCP trials, so both see the same machine: a shared or busy
  // machine lowers some trials of each, and best against best (each the
  // closest to what it can do) is a like-for-like comparison. Medians too.
  std::vector<double> head_tcp;
  GoodputCell head;
  {
    BenchOptions ho = o;
    ho.cell_bytes = o.headline_bytes;
    head = RunGoodputCell(ho, 64 * kMiB, 2, 1, o.headline_trials,
                          [&] { head_tcp.push_back(tcp_trial()); });
    head_tcp.push_back(tcp_trial());  // One after the last gRPC trial too.
  }
  const double head_best =
      head.trial_goodput.empty()
          ? 0
          : *std::max_element(head.trial_goodput.begin(), head.trial_goodput.end());
  const double head_median = Median(head.trial_goodput);
  const double head_tcp_median = Median(head_tcp);
  if (head.refused.empty()) {
    std::printf("(h) headline: 64 MB model, 2 shards, 1 worker, %d trials of %d "
                "rounds interleaved with raw TCP trials\n"
                "    gRPC push+pull GB/s: %s (best %.2f, median %.2f; %.2f CPU s "
                "per GB)\n    raw TCP GB/s:        %s (median %.2f)\n"
                "    best gRPC / best TCP of the whole run (%.2f GB/s): %.3f; "
                "median / median: %.3f\n",
                o.headline_trials, head.rounds,
                JoinGBps(head.trial_goodput).c_str(), GBps(head_best),
                GBps(head_median), head.cpu_s_per_gb,
                JoinGBps(head_tcp).c_str(), GBps(head_tcp_median),
                GBps(tcp_bps), tcp_bps > 0 ? head_best / tcp_bps : 0.0,
                head_tcp_median > 0 ? head_median / head_tcp_median : 0.0);
  } else {
    std::printf("(h) headline cell FAILED: %s\n\n", head.refused.c_str());
  }
  // Context, not the goal's denominator: raw TCP when each end walks a
  // 64 MiB span (main memory, as a 64 MB model is) instead of reusing one
  // cache-resident 4 MiB buffer.
  // Context too: two raw TCP streams at once, as a PushPull round's two
  // directions overlap across shards.
  auto best_of_3 = [](const LoopbackTcpOptions& options, double* best) {
    std::vector<std::string> trials;
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<LoopbackTcpResult> r = MeasureLoopbackTcp(options);
      if (!r.ok()) {
        trials.push_back(absl::StrCat("FAILED: ", r.status().ToString()));
        continue;
      }
      trials.push_back(absl::StrFormat("%.2f", GBps(r->bytes_per_second)));
      *best = std::max(*best, r->bytes_per_second);
    }
    return absl::StrJoin(trials, ", ");
  };
  double span_tcp_bps = 0, two_tcp_bps = 0;
  {
    LoopbackTcpOptions span_options = tcp_options;
    span_options.span_bytes = 64 * kMiB;
    const std::string trials = best_of_3(span_options, &span_tcp_bps);
    std::printf("    context: raw TCP through a 64 MiB span at each end, best of "
                "3: %.2f GB/s (trials %s); best gRPC / that: %.3f\n",
                GBps(span_tcp_bps), trials.c_str(),
                span_tcp_bps > 0 ? head_best / span_tcp_bps : 0.0);
    LoopbackTcpOptions two_options = tcp_options;
    two_options.streams = 2;
    const std::string two_trials = best_of_3(two_options, &two_tcp_bps);
    std::printf("    context: raw TCP, two streams at once (both directions, as "
                "a PushPull round's overlap), best of 3: %.2f GB/s (trials %s); "
                "best gRPC / that: %.3f\n\n",
                GBps(two_tcp_bps), two_trials.c_str(),
                two_tcp_bps > 0 ? head_best / two_tcp_bps : 0.0);
  }

  std::fflush(stdout);

  // (a)
  std::printf("(a) push+pull goodput through gRPC (in-process servers, "
              "max_chunk_bytes %lld, parts of %lld KiB, %s connections per "
              "shard, %d calls in flight per connection, %s, %s payloads, %s "
              "connections per worker)\n",
              static_cast<long long>(o.max_chunk_bytes),
              static_cast<long long>(o.part_bytes >> 10),
              o.connections_per_shard == 0
                  ? "2 (1 shard) or 1 (more)"
                  : absl::StrCat(o.connections_per_shard).c_str(),
              o.calls_in_flight,
              o.push_pull ? "rounds of PushPull" : "rounds of Pull then Push",
              wire::EncodingName(o.encoding),
              o.separate_connections ? "separate" : "shared");
  std::printf("%8s %6s %7s %6s %10s %9s %8s %10s %10s %8s %6s %9s\n", "model",
              "shards", "workers", "rounds", "goodput", "", "vs TCP",
              o.push_pull ? "" : "pull ms", o.push_pull ? "round ms" : "push ms",
              "CPU s", "sys", "faults");
  std::printf("%8s %6s %7s %6s %10s %9s %8s %10s %10s %8s %6s %9s\n", "MB", "",
              "", "", "GB/s", "Gbit/s", "", "(mean)", "(mean)", "per GB",
              "share", "per MiB");
  std::vector<GoodputCell> cells;
  for (int64_t mb : o.sizes_mb) {
    for (int shards : o.shards) {
      for (int workers : o.workers) {
        GoodputCell c = RunGoodputCell(o, mb * kMiB, shards, workers);
        if (c.refused.empty()) {
          std::printf(
              "%8lld %6d %7d %6d %10.3f %9.2f %8.3f %10s %10.1f %8.2f %5.0f%% "
              "%9.1f\n",
              static_cast<long long>(mb), shards, workers, c.rounds,
              GBps(c.goodput), Gbps(c.goodput),
              tcp_bps > 0 ? c.goodput / tcp_bps : 0.0,
              o.push_pull ? ""
                          : absl::StrFormat("%.1f", c.pull_mean_s * 1e3).c_str(),
              c.push_mean_s * 1e3, c.cpu_s_per_gb, c.sys_fraction * 100,
              c.faults_per_mb);
        } else {
          std::printf("%8lld %6d %7d %6s  %s\n", static_cast<long long>(mb),
                      shards, workers, "-", c.refused.c_str());
        }
        std::fflush(stdout);
        cells.push_back(std::move(c));
      }
    }
  }
  const LatencyResult lat = RunSmallLatency(o);
  if (lat.error.empty()) {
    std::printf("\n(a) 4 KB ops (1024 floats, 1 shard, 1 worker), %d each: "
                "pull p50 %.0f us, p99 %.0f us (mean %.0f); "
                "push p50 %.0f us, p99 %.0f us\n\n",
                lat.ops, lat.pull_p50_us, lat.pull_p99_us, lat.pull_mean_us,
                lat.push_p50_us, lat.push_p99_us);
  } else {
    std::printf("\n(a) 4 KB ops FAILED: %s\n\n", lat.error.c_str());
  }
  std::fflush(stdout);

  // (c)
  const double memcpy_bps = MeasureMemcpy(o.apply_bytes, o.apply_rounds);
  std::printf("(c) server apply of a %lld MiB gradient (median of %d), vs memcpy "
              "of the same bytes: memcpy %.2f GB/s\n",
              static_cast<long long>(o.apply_bytes / kMiB), o.apply_rounds,
              GBps(memcpy_bps));
  std::printf("%10s %22s %10s %22s %10s\n", "optimizer", "ParameterStore::Push",
              "vs memcpy", "Optimizer::Apply only", "vs memcpy");
  std::vector<ApplyResult> applies;
  for (const char* name : {"sgd", "momentum", "adagrad"}) {
    ApplyResult a = MeasureApply(name, o.apply_bytes, o.apply_rounds);
    if (a.error.empty()) {
      std::printf("%10s %17.2f GB/s %10.3f %17.2f GB/s %10.3f\n", name,
                  GBps(a.store_push), a.store_push / memcpy_bps,
                  GBps(a.optimizer_only), a.optimizer_only / memcpy_bps);
    } else {
      std::printf("%10s FAILED: %s\n", name, a.error.c_str());
    }
    applies.push_back(std::move(a));
  }
  std::fflush(stdout);

  // (d)
  std::string stage_error;
  const std::vector<Stage> stages =
      MeasureCopyStages(o.apply_bytes, o.apply_rounds,
                        o.streaming_pull_min_bytes, &stage_error);
  std::printf("\n(d) user-space stages of one %lld MiB push and pull (1 shard, "
              "1 MiB chunks; each timed alone, median of %d)\n",
              static_cast<long long>(o.apply_bytes / kMiB), o.apply_rounds);
  double push_stage_s = 0, pull_stage_s = 0;
  for (const Stage& st : stages) {
    std::printf("  %-62s %9.2f GB/s %8.1f ms\n", st.name.c_str(),
                GBps(st.bytes_per_second), st.seconds * 1e3);
    if (st.name.rfind("push", 0) == 0) push_stage_s += st.seconds;
    if (st.name.rfind("pull", 0) == 0) pull_stage_s += st.seconds;
  }
  if (!stage_error.empty()) std::printf("  FAILED: %s\n", stage_error.c_str());
  const double tcp_s = tcp_bps > 0 ? o.apply_bytes / tcp_bps : 0;
  std::printf("  sum: push %.1f ms, pull %.1f ms in user space; + %.1f ms each "
              "for the bytes through loopback TCP at (b)'s rate\n",
              push_stage_s * 1e3, pull_stage_s * 1e3, tcp_s * 1e3);

  const double tcp_end_bps = tcp_trial();
  std::printf("\n(b) loopback TCP again at the end: %.2f GB/s (%.1f Gbit/s)\n",
              GBps(tcp_end_bps), Gbps(tcp_end_bps));

  // JSON. Ratios use the best TCP trial of the run.
  auto find_cell = [&](int64_t mb, int shards, int workers) -> const GoodputCell* {
    for (const GoodputCell& c : cells) {
      if (c.model_bytes == mb * kMiB && c.shards == shards &&
          c.workers == workers && c.refused.empty()) {
        return &c;
      }
    }
    return nullptr;
  };
  const GoodputCell* key = find_cell(64, 2, 1);
  const double key_goodput = key != nullptr ? key->goodput : 0;
  // tcp_bps is now the best of every TCP trial in the run.
  double best_goodput = 0;
  std::string best_cell = "none";
  std::vector<std::string> refused;
  for (const GoodputCell& c : cells) {
    const std::string id = absl::StrCat(c.model_bytes / kMiB, "MB/", c.shards,
                                        "s/", c.workers, "w");
    if (!c.refused.empty()) {
      refused.push_back(absl::StrCat("\"", id, "\""));
    } else if (c.goodput > best_goodput) {
      best_goodput = c.goodput;
      best_cell = id;
    }
  }
  const ApplyResult* sgd = nullptr;
  const ApplyResult* adagrad = nullptr;
  for (const ApplyResult& a : applies) {
    if (a.optimizer == "sgd" && a.error.empty()) sgd = &a;
    if (a.optimizer == "adagrad" && a.error.empty()) adagrad = &a;
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const double sgd_bps = sgd != nullptr ? sgd->store_push : 0;
  const double adagrad_bps = adagrad != nullptr ? adagrad->store_push : 0;
  std::string json = absl::StrFormat(
      "{\"goodput_vs_tcp\":%.4f,\"apply_vs_memcpy\":%.4f,\"tcp_gbps\":%.3f,"
      "\"goodput_64mb_2shards_gbps\":%.3f,\"goodput_vs_tcp_median\":%.4f,"
      "\"headline_trials\":%d,\"table_64mb_2s_1w_vs_tcp\":%.4f,"
      "\"tcp_64mb_span_gbps\":%.3f,\"goodput_vs_tcp_64mb_span\":%.4f,"
      "\"tcp_two_streams_gbps\":%.3f,\"goodput_vs_tcp_two_streams\":%.4f,\"memcpy_gbps\":%.3f,"
      "\"apply_gbps\":%.3f,\"tcp_end_gbps\":%.3f,\"apply_adagrad_gbps\":%.3f,"
      "\"apply_adagrad_vs_memcpy\":%.4f,\"apply_sgd_optimizer_only_gbps\":%.3f,"
      "\"best_goodput_gbps\":%.3f,\"best_goodput_cell\":\"%s\","
      "\"latency_4kb_pull_p50_us\":%.1f,\"latency_4kb_pull_p99_us\":%.1f,"
      "\"latency_4kb_push_p50_us\":%.1f,\"latency_4kb_push_p99_us\":%.1f,"
      "\"refused_cells\":[%s],\"units\":\"gbps = 1e9 bit/s\","
      "\"separate_connections\":%s,\"part_kb\":%lld,"
      "\"connections_per_shard\":%d,\"calls_in_flight\":%d,"
      "\"push_pull\":%s,\"wire_encoding\":\"%s\","
      "\"quick\":%s,\"load_before\":\"%s\","
      "\"load_after\":\"%s\",\"seconds\":%.1f}",
      ratio(head_best, tcp_bps), ratio(sgd_bps, memcpy_bps), Gbps(tcp_bps),
      Gbps(head_best), ratio(head_median, head_tcp_median),
      static_cast<int>(head.trial_goodput.size()), ratio(key_goodput, tcp_bps),
      Gbps(span_tcp_bps), ratio(head_best, span_tcp_bps), Gbps(two_tcp_bps),
      ratio(head_best, two_tcp_bps), Gbps(memcpy_bps), Gbps(sgd_bps), Gbps(tcp_end_bps),
      Gbps(adagrad_bps),
      ratio(adagrad_bps, memcpy_bps),
      Gbps(sgd != nullptr ? sgd->optimizer_only : 0), Gbps(best_goodput),
      best_cell, lat.pull_p50_us, lat.pull_p99_us, lat.push_p50_us,
      lat.push_p99_us, absl::StrJoin(refused, ","),
      o.separate_connections ? "true" : "false",
      static_cast<long long>(o.part_bytes >> 10), o.connections_per_shard,
      o.calls_in_flight, o.push_pull ? "true" : "false",
      wire::EncodingName(o.encoding),
      o.quick ? "true" : "false", load_before, LoadAverage(),
      SecondsSince(t_begin));
  std::printf("\n%s\n", json.c_str());
  return 0;
}

template <typename T>
bool ParseList(const std::string& text, std::vector<T>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour transport benchmark: gRPC push/pull goodput vs raw loopback "
      "TCP, server apply rate vs memcpy. See the file comment.");
  absl::ParseCommandLine(argc, argv);
  // As ps_server and ps_worker do.
  downpour::TuneMallocForLargeBuffers();
  // Debian's abseil is built with deadlock detection on: a lock-order graph
  // update on every Mutex acquisition (~1% of the transport's CPU). Tests
  // keep it; the binaries turn it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const bool quick = absl::GetFlag(FLAGS_quick);
  downpour::BenchOptions o;
  o.quick = quick;
  auto pick = [](auto flag_value, auto full, auto quick_value, bool q) {
    return flag_value != 0 ? flag_value : (q ? quick_value : full);
  };
  const std::string sizes = absl::GetFlag(FLAGS_sizes_mb);
  const std::string shards = absl::GetFlag(FLAGS_shards);
  const std::string workers = absl::GetFlag(FLAGS_workers);
  if (!downpour::ParseList(sizes.empty() ? (quick ? "1,64" : "1,16,64,256") : sizes,
                           &o.sizes_mb) ||
      !downpour::ParseList(shards.empty() ? (quick ? "1,2" : "1,2,4") : shards,
                           &o.shards) ||
      !downpour::ParseList(workers.empty() ? "1,4" : workers, &o.workers)) {
    std::fprintf(stderr, "transport_bench: --sizes_mb, --shards and --workers "
                         "take comma-separated positive integers\n");
    return 2;
  }
  o.cell_bytes = pick(absl::GetFlag(FLAGS_cell_mb), int64_t{1536}, int64_t{256},
                      quick) * downpour::kMiB;
  o.min_rounds = pick(absl::GetFlag(FLAGS_min_rounds), 2, 2, quick);
  o.max_rounds = pick(absl::GetFlag(FLAGS_max_rounds), 50, 50, quick);
  o.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  o.part_bytes = absl::GetFlag(FLAGS_part_kb) << 10;
  o.connections_per_shard = absl::GetFlag(FLAGS_connections_per_shard);
  o.calls_in_flight = absl::GetFlag(FLAGS_calls_in_flight);
  o.push_pull = absl::GetFlag(FLAGS_push_pull);
  {
    const int64_t mb = absl::GetFlag(FLAGS_streaming_pull_min_mb);
    o.streaming_pull_min_bytes =
        mb < 0 ? std::numeric_limits<int64_t>::max() : mb * downpour::kMiB;
  }
  {
    absl::StatusOr<downpour::wire::Encoding> e =
        downpour::wire::ParseEncoding(absl::GetFlag(FLAGS_wire_encoding));
    if (!e.ok()) {
      std::fprintf(stderr, "transport_bench: %s\n", e.status().ToString().c_str());
      return 2;
    }
    o.encoding = *e;
  }
  o.separate_connections = absl::GetFlag(FLAGS_separate_connections);
  o.latency_ops = pick(absl::GetFlag(FLAGS_latency_ops), 2000, 300, quick);
  o.tcp_bytes = pick(absl::GetFlag(FLAGS_tcp_mb), int64_t{1024}, int64_t{256},
                     quick) * downpour::kMiB;
  o.tcp_write_bytes = absl::GetFlag(FLAGS_tcp_write_kb) << 10;
  o.apply_bytes = absl::GetFlag(FLAGS_apply_mb) * downpour::kMiB;
  o.apply_rounds = pick(absl::GetFlag(FLAGS_apply_rounds), 10, 3, quick);
  o.headline_trials = pick(absl::GetFlag(FLAGS_headline_trials), 5, 3, quick);
  o.headline_bytes = pick(absl::GetFlag(FLAGS_headline_mb), int64_t{512},
                          int64_t{256}, quick) * downpour::kMiB;
  if (o.min_rounds < 1 || o.max_rounds < o.min_rounds || o.cell_bytes <= 0 ||
      o.max_chunk_bytes < 4 || o.latency_ops < 1 || o.tcp_bytes <= 0 ||
      o.tcp_write_bytes <= 0 || o.apply_bytes < 4 * downpour::kMiB ||
      o.apply_rounds < 1 || o.headline_trials < 1 || o.headline_bytes <= 0) {
    std::fprintf(stderr, "transport_bench: a size or count flag is out of range\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_security_cost)) return downpour::RunSecurityCostMode(o);
  return downpour::Run(o);
}
