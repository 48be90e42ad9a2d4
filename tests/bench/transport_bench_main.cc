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
//
// This file holds the flags and main; the sections are in
// transport_sections.cc, the gRPC cells in goodput_cell.cc, (c) and (d) in
// apply_stages.cc, shared helpers in transport_bench_util.cc.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/malloc_tuning.h"
#include "rpc/wire.h"
#include "server/store_flags.h"
#include "tests/bench/goodput_cell.h"
#include "tests/bench/security_cost.h"
#include "tests/bench/snapshot_cost.h"
#include "tests/bench/transport_bench_util.h"
#include "tests/bench/transport_sections.h"
#include "worker/grpc_ps_client.h"
#include "worker/transport_flags.h"

// Every tunable of the benchmark. 0 / empty means "the profile's default"
// (the full profile, or the --quick one). The clients' transport
// (--part_kb, --connections_per_shard, --calls_in_flight, --push_dtype,
// --pull_dtype) and the layout's --max_chunk_bytes are ps_worker's flags
// with ps_worker's defaults (worker/transport_flags.h);
// --checkpoint_every_s is ps_server's (server/store_flags.h).
ABSL_FLAG(bool, quick, false,
          "Smoke profile (~20 s): fewer sizes and cells, fewer bytes.");
ABSL_FLAG(std::string, sizes_mb, "",
          "Model sizes in MiB for (a). Full: 1,16,64,256. Quick: 1,64.");
ABSL_FLAG(std::string, shards, "", "Shard counts for (a). Full: 1,2,4. Quick: 1,2.");
ABSL_FLAG(std::string, worker_counts, "",
          "Concurrent workers for (a), comma-separated. Default 1,4.");
ABSL_FLAG(int64_t, cell_mb, 0,
          "Target MiB moved (push + pull, all workers) per (a) cell; rounds "
          "are derived from it. Full: 1536. Quick: 256.");
ABSL_FLAG(int, min_rounds, 0, "Fewest timed rounds per cell. Default 2.");
ABSL_FLAG(int, max_rounds, 0, "Most timed rounds per cell. Default 50.");
ABSL_FLAG(bool, push_pull, true,
          "A round is one ParameterClient::PushPull, as an async worker's "
          "exchange is; false: a Pull, then a Push.");
ABSL_FLAG(int64_t, streaming_pull_min_mb, 32,
          "Pulls into parameter vectors of at least this many MiB write them "
          "with non-temporal stores (GrpcClientOptions::"
          "streaming_pull_min_bytes); -1: never.");
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
// The TLS mode (tests/bench/security_cost.h).
ABSL_FLAG(bool, security_cost, false,
          "Only the 64 MiB, 2-shard, 1-worker goodput cell with plaintext, "
          "token, mTLS and mTLS + token, side by side (--headline_trials each).");
ABSL_FLAG(std::string, certs_dir, "",
          "--security_cost: make_certs.sh's files (default: made now in a "
          "temporary directory with deploy/make_certs.sh).");
// The snapshot cost mode (tests/bench/snapshot_cost.h).
ABSL_FLAG(bool, snapshot_cost, false,
          "Only the 64 MiB, 2-shard, 1-worker goodput cell with shard "
          "snapshots off and on (every --checkpoint_every_s, into a temporary "
          "folder), --headline_trials each, interleaved.");

namespace downpour {
namespace transport_bench {
namespace {

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

// The flag's value if set (non-zero), else the profile's default.
template <typename T>
T Pick(T flag_value, T full, T quick_value, bool quick) {
  return flag_value != 0 ? flag_value : (quick ? quick_value : full);
}

// --security_cost. The 64 MiB, 2-shard, 1-worker
// cell (section (h)'s) with each security setting, trials interleaved.
int RunSecurityCostMode(BenchOptions o, std::string dir) {
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

// --snapshot_cost. The 64 MiB, 2-shard, 1-worker cell with
// snapshots off and on, trials interleaved.
int RunSnapshotCostMode(const BenchOptions& o, absl::Duration every) {
  auto cost = RunSnapshotCost(
      every, 2, o.headline_trials,
      [&](const std::function<void(InProcessCluster*)>& on_cluster)
          -> absl::StatusOr<double> {
        GoodputCell cell = RunGoodputCell(o, 64 * kMiB, 2, 1, 1, {}, on_cluster);
        if (!cell.refused.empty()) return absl::InternalError(cell.refused);
        std::fprintf(stderr, "  trial (%s): %.2f GB/s over %.1f s\n",
                     on_cluster ? "snapshots on" : "snapshots off",
                     GBps(cell.goodput), cell.seconds);
        return cell.goodput;
      });
  if (!cost.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", cost.status().ToString().c_str());
    return 1;
  }
  std::printf("snapshot cost: push+pull goodput, 64 MiB, 2 shards, 1 worker, %d "
              "trials of %d rounds each way (load %s)\n%s", o.headline_trials,
              static_cast<int>(std::clamp<int64_t>(o.cell_bytes / (2 * 64 * kMiB),
                                                   o.min_rounds, o.max_rounds)),
              LoadAverage().c_str(), SnapshotCostTable(*cost).c_str());
  return 0;
}

// --sizes_mb, --shards, --worker_counts and the transport flags; false
// (having said why on stderr) when one is malformed.
bool ListsFromFlags(bool quick, BenchOptions* o) {
  const std::string sizes = absl::GetFlag(FLAGS_sizes_mb);
  const std::string shards = absl::GetFlag(FLAGS_shards);
  const std::string workers = absl::GetFlag(FLAGS_worker_counts);
  if (!ParseList(sizes.empty() ? (quick ? "1,64" : "1,16,64,256") : sizes,
                 &o->sizes_mb) ||
      !ParseList(shards.empty() ? (quick ? "1,2" : "1,2,4") : shards,
                 &o->shards) ||
      !ParseList(workers.empty() ? "1,4" : workers, &o->workers)) {
    std::fprintf(stderr, "transport_bench: --sizes_mb, --shards and "
                         "--worker_counts take comma-separated positive "
                         "integers\n");
    return false;
  }
  // ps_worker's transport settings; the benchmark keeps its own deadlines
  // and never retries (goodput_cell.cc).
  GrpcClientOptions client;
  if (absl::Status s = TransportOptionsFromFlags(&client); !s.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", s.ToString().c_str());
    return false;
  }
  o->part_bytes = client.part_bytes;
  o->connections_per_shard = client.connections_per_shard;
  o->calls_in_flight = client.max_calls_in_flight_per_connection;
  o->push_encoding = client.push_encoding;
  o->pull_encoding = client.pull_encoding;
  o->shared_memory = client.shared_memory;
  o->shared_memory_calls = client.shared_memory_calls;
  o->max_chunk_bytes = MaxChunkBytesFromFlags();
  return true;
}

// Every size and count flag, with the profile's defaults.
void SizesFromFlags(bool quick, BenchOptions* o) {
  o->cell_bytes = Pick(absl::GetFlag(FLAGS_cell_mb), int64_t{1536},
                       int64_t{256}, quick) * kMiB;
  o->min_rounds = Pick(absl::GetFlag(FLAGS_min_rounds), 2, 2, quick);
  o->max_rounds = Pick(absl::GetFlag(FLAGS_max_rounds), 50, 50, quick);
  o->push_pull = absl::GetFlag(FLAGS_push_pull);
  const int64_t mb = absl::GetFlag(FLAGS_streaming_pull_min_mb);
  o->streaming_pull_min_bytes =
      mb < 0 ? std::numeric_limits<int64_t>::max() : mb * kMiB;
  o->separate_connections = absl::GetFlag(FLAGS_separate_connections);
  o->latency_ops = Pick(absl::GetFlag(FLAGS_latency_ops), 2000, 300, quick);
  o->tcp_bytes = Pick(absl::GetFlag(FLAGS_tcp_mb), int64_t{1024}, int64_t{256},
                      quick) * kMiB;
  o->tcp_write_bytes = absl::GetFlag(FLAGS_tcp_write_kb) << 10;
  o->apply_bytes = absl::GetFlag(FLAGS_apply_mb) * kMiB;
  o->apply_rounds = Pick(absl::GetFlag(FLAGS_apply_rounds), 10, 3, quick);
  o->headline_trials = Pick(absl::GetFlag(FLAGS_headline_trials), 5, 3, quick);
  o->headline_bytes = Pick(absl::GetFlag(FLAGS_headline_mb), int64_t{512},
                           int64_t{256}, quick) * kMiB;
}

// The benchmark's options from the flags; false (having said why on stderr)
// when a flag is malformed or out of range.
bool OptionsFromFlags(BenchOptions* o) {
  const bool quick = absl::GetFlag(FLAGS_quick);
  o->quick = quick;
  if (!ListsFromFlags(quick, o)) return false;
  SizesFromFlags(quick, o);
  if (o->min_rounds < 1 || o->max_rounds < o->min_rounds ||
      o->cell_bytes <= 0 || o->max_chunk_bytes < 4 || o->latency_ops < 1 ||
      o->tcp_bytes <= 0 || o->tcp_write_bytes <= 0 ||
      o->apply_bytes < 4 * kMiB || o->apply_rounds < 1 ||
      o->headline_trials < 1 || o->headline_bytes <= 0) {
    std::fprintf(stderr, "transport_bench: a size or count flag is out of range\n");
    return false;
  }
  return true;
}

}  // namespace
}  // namespace transport_bench
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
  downpour::transport_bench::BenchOptions o;
  if (!downpour::transport_bench::OptionsFromFlags(&o)) return 2;
  if (absl::GetFlag(FLAGS_security_cost)) {
    return downpour::transport_bench::RunSecurityCostMode(
        o, absl::GetFlag(FLAGS_certs_dir));
  }
  if (absl::GetFlag(FLAGS_snapshot_cost)) {
    absl::StatusOr<downpour::StoreFlags> store = downpour::StoreFlagsFromFlags();
    if (!store.ok()) {
      std::fprintf(stderr, "transport_bench: %s\n",
                   store.status().ToString().c_str());
      return 2;
    }
    return downpour::transport_bench::RunSnapshotCostMode(
        o, store->checkpoint_every);
  }
  return downpour::transport_bench::RunTransportBench(o);
}
