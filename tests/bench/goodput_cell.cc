#include "tests/bench/goodput_cell.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/bench/inprocess_cluster.h"
#include "worker/grpc_ps_client.h"

namespace downpour {
namespace transport_bench {
namespace {

std::string Describe(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kResourceExhausted) {
    return "refused (message limit)";
  }
  return absl::StrCat("failed: ", s.ToString());
}

// What each worker thread of a cell owns, indexed by worker.
struct WorkerState {
  std::vector<std::unique_ptr<ParameterClient>> clients;
  std::vector<absl::Status> status;
  std::vector<double> pull_s, push_s;
  std::vector<std::vector<float>> params;
  std::vector<std::vector<int64_t>> versions;
  std::vector<int64_t> seq;
};

// One client per worker, each declaring the model (all values 0.5).
absl::Status ConnectClients(const BenchOptions& o, InProcessCluster& cluster,
                            const ModelLayout& layout, int64_t n, int workers,
                            WorkerState* state) {
  const std::vector<float> initial(n, 0.5f);
  for (int w = 0; w < workers; ++w) {
    GrpcClientOptions client_options;
    client_options.hosts = cluster.HostsForClient(w);
    client_options.worker_id = w;
    client_options.rpc_timeout = absl::Seconds(120);
    client_options.connect_timeout = absl::Seconds(10);
    client_options.max_attempts = 1;  // A benchmark reports, never retries.
    client_options.part_bytes = o.part_bytes;
    client_options.connections_per_shard = o.connections_per_shard;
    client_options.max_calls_in_flight_per_connection = o.calls_in_flight;
    client_options.streaming_pull_min_bytes = o.streaming_pull_min_bytes;
    client_options.push_encoding = o.push_encoding;
    client_options.pull_encoding = o.pull_encoding;
    client_options.shared_memory = o.shared_memory;
    client_options.shared_memory_calls = o.shared_memory_calls;
    client_options.security = o.security;
    absl::StatusOr<std::unique_ptr<ParameterClient>> client =
        NewGrpcParameterClient(client_options);
    absl::Status s = client.status();
    if (s.ok()) s = (*client)->Declare(layout, initial);
    if (!s.ok()) return s;
    state->clients.push_back(std::move(client).value());
  }
  return absl::OkStatus();
}

// One untimed round: connections warm, buffers allocated, pages touched.
absl::Status WarmUp(const std::vector<float>& zeros, WorkerState* state) {
  for (size_t w = 0; w < state->clients.size(); ++w) {
    absl::Status s = state->clients[w]->Pull(absl::MakeSpan(state->params[w]),
                                             &state->versions[w]);
    if (s.ok()) {
      s = state->clients[w]->Push(state->seq[w]++, zeros, state->versions[w]);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// One worker's `rounds` timed rounds; its status into state->status[w].
void WorkerRounds(const BenchOptions& o, int rounds, int w,
                  const std::vector<float>& zeros, WorkerState* state) {
  ParameterClient& client = *state->clients[w];
  std::vector<float>& params = state->params[w];
  std::vector<int64_t>& versions = state->versions[w];
  absl::Status s;
  for (int r = 0; r < rounds && s.ok(); ++r) {
    const Clock::time_point t0 = Clock::now();
    if (o.push_pull) {
      s = client.PushPull(state->seq[w]++, zeros, versions,
                          absl::MakeSpan(params), &versions, PullOptions());
      state->push_s[w] += SecondsSince(t0);
      continue;
    }
    s = client.Pull(absl::MakeSpan(params), &versions);
    const Clock::time_point t1 = Clock::now();
    if (s.ok()) s = client.Push(state->seq[w]++, zeros, versions);
    state->pull_s[w] += std::chrono::duration<double>(t1 - t0).count();
    state->push_s[w] += SecondsSince(t1);
  }
  state->status[w] = s;
}

// Zero gradients leave the initial 0.5 everywhere: "" or what is wrong.
std::string CheckPulled(const WorkerState& state) {
  for (const std::vector<float>& p : state.params) {
    const auto wrong = std::find_if(p.begin(), p.end(),
                                    [](float v) { return v != 0.5f; });
    if (wrong != p.end()) {
      return absl::StrCat("pulled value ", *wrong, " at index ",
                          wrong - p.begin(), ", expected 0.5");
    }
  }
  return "";
}

// One timed trial of every worker at once. Adds its wall time to
// cell->seconds and its CPU use to *used; false (with cell->refused) on an
// error.
bool RunTrial(const BenchOptions& o, const std::vector<float>& zeros,
              GoodputCell* cell, WorkerState* state, Usage* used) {
  // Every value the trial pulls must arrive: poison the vectors first.
  for (std::vector<float>& p : state->params) {
    std::fill(p.begin(), p.end(), -1.0f);
  }
  const Usage trial_usage_start = GetUsage();
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < cell->workers; ++w) {
    threads.emplace_back(
        [&, w] { WorkerRounds(o, cell->rounds, w, zeros, state); });
  }
  for (std::thread& th : threads) th.join();
  const double seconds = SecondsSince(start);
  const Usage trial_usage_end = GetUsage();
  for (const absl::Status& s : state->status) {
    if (!s.ok()) {
      cell->refused = Describe(s);
      return false;
    }
  }
  cell->refused = CheckPulled(*state);
  if (!cell->refused.empty()) return false;
  cell->seconds += seconds;
  cell->trial_goodput.push_back(2.0 * cell->model_bytes * cell->workers *
                                cell->rounds / seconds);
  used->user_s += trial_usage_end.user_s - trial_usage_start.user_s;
  used->sys_s += trial_usage_end.sys_s - trial_usage_start.sys_s;
  used->minor_faults +=
      trial_usage_end.minor_faults - trial_usage_start.minor_faults;
  return true;
}

// The cell's figures from its trials' totals.
void Summarize(const Usage& used, int trials, const WorkerState& state,
               GoodputCell* cell) {
  const int workers = cell->workers;
  const double moved =
      2.0 * cell->model_bytes * workers * cell->rounds * trials;
  cell->goodput = moved / cell->seconds;
  const double user = used.user_s;
  const double sys = used.sys_s;
  cell->cpu_s_per_gb = (user + sys) / (moved / 1e9);
  cell->sys_fraction = user + sys > 0 ? sys / (user + sys) : 0;
  cell->faults_per_mb = used.minor_faults / (moved / kMiB);
  double pull_total = 0, push_total = 0;
  for (int w = 0; w < workers; ++w) {
    pull_total += state.pull_s[w];
    push_total += state.push_s[w];
  }
  cell->pull_mean_s = pull_total / (workers * cell->rounds * trials);
  cell->push_mean_s = push_total / (workers * cell->rounds * trials);
}

}  // namespace

GoodputCell RunGoodputCell(const BenchOptions& o, int64_t model_bytes,
                           int shards, int workers, int trials,
                           const std::function<void()>& between_trials,
                           const std::function<void(InProcessCluster*)>& on_cluster) {
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
  WorkerState state;
  if (absl::Status s = ConnectClients(o, **cluster, layout, n, workers, &state);
      !s.ok()) {
    cell.refused = Describe(s);
    return cell;
  }
  const std::vector<float> zeros(n, 0.0f);  // Shared, read-only.
  state.status.resize(workers);
  state.pull_s.assign(workers, 0);
  state.push_s.assign(workers, 0);
  state.params.assign(workers, std::vector<float>(n));
  state.versions.resize(workers);
  state.seq.assign(workers, 1);
  if (absl::Status s = WarmUp(zeros, &state); !s.ok()) {
    cell.refused = Describe(s);
    return cell;
  }
  // Detaches whatever on_cluster attached before the cluster goes.
  struct Detach {
    const std::function<void(InProcessCluster*)>& f;
    ~Detach() {
      if (f) f(nullptr);
    }
  } detach{on_cluster};
  if (on_cluster) on_cluster(cluster->get());
  Usage used;  // Summed over the trials only.
  for (int t = 0; t < trials; ++t) {
    if (between_trials) between_trials();
    if (!RunTrial(o, zeros, &cell, &state, &used)) return cell;
  }
  Summarize(used, trials, state, &cell);
  return cell;
}

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
  client_options.shared_memory = o.shared_memory;
  client_options.shared_memory_calls = o.shared_memory_calls;
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

}  // namespace transport_bench
}  // namespace downpour
