#include "tests/bench/transport_sections.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rpc/wire.h"
#include "tests/bench/apply_stages.h"
#include "tests/bench/goodput_cell.h"
#include "tests/bench/loopback_tcp.h"

namespace downpour {
namespace transport_bench {
namespace {

// What the sections measured, in the order they run; the JSON line reads it.
struct RunState {
  Clock::time_point t_begin;
  std::string load_before;
  // (b): every raw TCP trial of the run, best first reported.
  LoopbackTcpOptions tcp_options;
  double tcp_bps = 0;  // The best TCP trial so far.
  std::vector<std::string> tcp_trials;
  double tcp_cpu_s = 0, tcp_sys_s = 0, tcp_gb = 0;
  // (h)
  GoodputCell head;
  std::vector<double> head_tcp;
  double head_best = 0, head_median = 0, head_tcp_median = 0;
  double span_tcp_bps = 0, two_tcp_bps = 0;
  // (a)
  std::vector<GoodputCell> cells;
  LatencyResult lat;
  // (c)
  double memcpy_bps = 0;
  std::vector<ApplyResult> applies;
  // (b) at the end.
  double tcp_end_bps = 0;
};

// One raw TCP trial: its bytes per second (0 on failure), also kept in r.
double TcpTrial(RunState* r) {
  const Usage before = GetUsage();
  absl::StatusOr<LoopbackTcpResult> t = MeasureLoopbackTcp(r->tcp_options);
  const Usage after = GetUsage();
  r->tcp_sys_s += after.sys_s - before.sys_s;
  r->tcp_cpu_s += after.user_s - before.user_s + after.sys_s - before.sys_s;
  if (!t.ok()) {
    r->tcp_trials.push_back(absl::StrCat("FAILED: ", t.status().ToString()));
    return 0;
  }
  r->tcp_trials.push_back(absl::StrFormat("%.2f", GBps(t->bytes_per_second)));
  r->tcp_gb += t->bytes / 1e9;
  r->tcp_bps = std::max(r->tcp_bps, t->bytes_per_second);
  return t->bytes_per_second;
}

// (b) first: it is the reference for everything else. Best of three
// trials, and one more at the end; other load on the machine only ever
// lowers a trial, so the best is the closest to what the machine can do.
void RunTcpReference(const BenchOptions& o, RunState* r) {
  r->tcp_options.total_bytes = o.tcp_bytes;
  r->tcp_options.write_bytes = o.tcp_write_bytes;
  for (int i = 0; i < 3; ++i) TcpTrial(r);
  std::printf("(b) raw loopback TCP, %lld MiB in %lld KiB writes, best of 3: "
              "%.2f GB/s (%.1f Gbit/s); trials %s GB/s; %.2f CPU s per GB, "
              "%.0f%% of it in the kernel\n\n",
              static_cast<long long>(o.tcp_bytes / kMiB),
              static_cast<long long>(o.tcp_write_bytes >> 10), GBps(r->tcp_bps),
              Gbps(r->tcp_bps), absl::StrJoin(r->tcp_trials, ", ").c_str(),
              r->tcp_gb > 0 ? r->tcp_cpu_s / r->tcp_gb : 0.0,
              r->tcp_cpu_s > 0 ? 100 * r->tcp_sys_s / r->tcp_cpu_s : 0.0);
  std::fflush(stdout);
}

// (h) the headline cell (64 MB, 2 shards, 1 worker) in trials interleaved
// with raw TCP trials, so both see the same machine: a shared or busy
// machine lowers some trials of each, and best against best (each the
// closest to what it can do) is a like-for-like comparison. Medians too.
void RunHeadline(const BenchOptions& o, RunState* r) {
  {
    BenchOptions ho = o;
    ho.cell_bytes = o.headline_bytes;
    r->head = RunGoodputCell(ho, 64 * kMiB, 2, 1, o.headline_trials,
                             [&] { r->head_tcp.push_back(TcpTrial(r)); });
    r->head_tcp.push_back(TcpTrial(r));  // One after the last gRPC trial too.
  }
  const GoodputCell& head = r->head;
  r->head_best = head.trial_goodput.empty()
                     ? 0
                     : *std::max_element(head.trial_goodput.begin(),
                                         head.trial_goodput.end());
  r->head_median = Median(head.trial_goodput);
  r->head_tcp_median = Median(r->head_tcp);
  if (head.refused.empty()) {
    std::printf("(h) headline: 64 MB model, 2 shards, 1 worker, %d trials of %d "
                "rounds interleaved with raw TCP trials\n"
                "    gRPC push+pull GB/s: %s (best %.2f, median %.2f; %.2f CPU s "
                "per GB)\n    raw TCP GB/s:        %s (median %.2f)\n"
                "    best gRPC / best TCP of the whole run (%.2f GB/s): %.3f; "
                "median / median: %.3f\n",
                o.headline_trials, head.rounds,
                JoinGBps(head.trial_goodput).c_str(), GBps(r->head_best),
                GBps(r->head_median), head.cpu_s_per_gb,
                JoinGBps(r->head_tcp).c_str(), GBps(r->head_tcp_median),
                GBps(r->tcp_bps),
                r->tcp_bps > 0 ? r->head_best / r->tcp_bps : 0.0,
                r->head_tcp_median > 0 ? r->head_median / r->head_tcp_median
                                       : 0.0);
  } else {
    std::printf("(h) headline cell FAILED: %s\n\n", head.refused.c_str());
  }
}

// Three raw TCP trials with `options`: their GB/s joined; the best into *best.
std::string BestOf3(const LoopbackTcpOptions& options, double* best) {
  std::vector<std::string> trials;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<LoopbackTcpResult> t = MeasureLoopbackTcp(options);
    if (!t.ok()) {
      trials.push_back(absl::StrCat("FAILED: ", t.status().ToString()));
      continue;
    }
    trials.push_back(absl::StrFormat("%.2f", GBps(t->bytes_per_second)));
    *best = std::max(*best, t->bytes_per_second);
  }
  return absl::StrJoin(trials, ", ");
}

// Context, not the goal's denominator: raw TCP when each end walks a
// 64 MiB span (main memory, as a 64 MB model is) instead of reusing one
// cache-resident 4 MiB buffer.
// Context too: two raw TCP streams at once, as a PushPull round's two
// directions overlap across shards.
void RunTcpContext(RunState* r) {
  LoopbackTcpOptions span_options = r->tcp_options;
  span_options.span_bytes = 64 * kMiB;
  const std::string trials = BestOf3(span_options, &r->span_tcp_bps);
  std::printf("    context: raw TCP through a 64 MiB span at each end, best of "
              "3: %.2f GB/s (trials %s); best gRPC / that: %.3f\n",
              GBps(r->span_tcp_bps), trials.c_str(),
              r->span_tcp_bps > 0 ? r->head_best / r->span_tcp_bps : 0.0);
  LoopbackTcpOptions two_options = r->tcp_options;
  two_options.streams = 2;
  const std::string two_trials = BestOf3(two_options, &r->two_tcp_bps);
  std::printf("    context: raw TCP, two streams at once (both directions, as "
              "a PushPull round's overlap), best of 3: %.2f GB/s (trials %s); "
              "best gRPC / that: %.3f\n\n",
              GBps(r->two_tcp_bps), two_trials.c_str(),
              r->two_tcp_bps > 0 ? r->head_best / r->two_tcp_bps : 0.0);
  std::fflush(stdout);
}

void PrintGoodputHeader(const BenchOptions& o) {
  const std::string connections =
      o.connections_per_shard == 0 ? "2 (1 shard) or 1 (more)"
                                   : absl::StrCat(o.connections_per_shard);
  const std::string calls =
      o.calls_in_flight < 0    ? "adaptive (from 1)"
      : o.calls_in_flight == 0 ? "unlimited"
                               : absl::StrCat(o.calls_in_flight);
  std::printf("(a) push+pull goodput through gRPC (in-process servers, "
              "max_chunk_bytes %lld, parts of %lld KiB, %s connections per "
              "shard, %s calls in flight per connection, %s, %s/%s payloads "
              "(push/pull), %s connections per worker)\n",
              static_cast<long long>(o.max_chunk_bytes),
              static_cast<long long>(o.part_bytes >> 10), connections.c_str(),
              calls.c_str(),
              o.push_pull ? "rounds of PushPull" : "rounds of Pull then Push",
              wire::EncodingName(o.push_encoding),
              wire::EncodingName(o.pull_encoding),
              o.separate_connections ? "separate" : "shared");
  std::printf("%8s %6s %7s %6s %10s %9s %8s %10s %10s %8s %6s %9s\n", "model",
              "shards", "workers", "rounds", "goodput", "", "vs TCP",
              o.push_pull ? "" : "pull ms", o.push_pull ? "round ms" : "push ms",
              "CPU s", "sys", "faults");
  std::printf("%8s %6s %7s %6s %10s %9s %8s %10s %10s %8s %6s %9s\n", "MB", "",
              "", "", "GB/s", "Gbit/s", "", "(mean)", "(mean)", "per GB",
              "share", "per MiB");
}

void PrintGoodputRow(const BenchOptions& o, const GoodputCell& c, int64_t mb,
                     double tcp_bps) {
  if (c.refused.empty()) {
    std::printf(
        "%8lld %6d %7d %6d %10.3f %9.2f %8.3f %10s %10.1f %8.2f %5.0f%% "
        "%9.1f\n",
        static_cast<long long>(mb), c.shards, c.workers, c.rounds,
        GBps(c.goodput), Gbps(c.goodput),
        tcp_bps > 0 ? c.goodput / tcp_bps : 0.0,
        o.push_pull ? ""
                    : absl::StrFormat("%.1f", c.pull_mean_s * 1e3).c_str(),
        c.push_mean_s * 1e3, c.cpu_s_per_gb, c.sys_fraction * 100,
        c.faults_per_mb);
  } else {
    std::printf("%8lld %6d %7d %6s  %s\n", static_cast<long long>(mb),
                c.shards, c.workers, "-", c.refused.c_str());
  }
  std::fflush(stdout);
}

// (a): every cell of the table, then the 4 KB latencies.
void RunGoodputTable(const BenchOptions& o, RunState* r) {
  PrintGoodputHeader(o);
  for (int64_t mb : o.sizes_mb) {
    for (int shards : o.shards) {
      for (int workers : o.workers) {
        GoodputCell c = RunGoodputCell(o, mb * kMiB, shards, workers);
        PrintGoodputRow(o, c, mb, r->tcp_bps);
        r->cells.push_back(std::move(c));
      }
    }
  }
  r->lat = RunSmallLatency(o);
  const LatencyResult& lat = r->lat;
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
}

// (c)
void RunApplyTable(const BenchOptions& o, RunState* r) {
  r->memcpy_bps = MeasureMemcpy(o.apply_bytes, o.apply_rounds);
  std::printf("(c) server apply of a %lld MiB gradient (median of %d), vs memcpy "
              "of the same bytes: memcpy %.2f GB/s\n",
              static_cast<long long>(o.apply_bytes / kMiB), o.apply_rounds,
              GBps(r->memcpy_bps));
  std::printf("%10s %22s %10s %22s %10s\n", "optimizer", "ParameterStore::Push",
              "vs memcpy", "Optimizer::Apply only", "vs memcpy");
  for (const char* name : {"sgd", "momentum", "adagrad", "adam"}) {
    ApplyResult a = MeasureApply(name, o.apply_bytes, o.apply_rounds);
    if (a.error.empty()) {
      std::printf("%10s %17.2f GB/s %10.3f %17.2f GB/s %10.3f\n", name,
                  GBps(a.store_push), a.store_push / r->memcpy_bps,
                  GBps(a.optimizer_only), a.optimizer_only / r->memcpy_bps);
    } else {
      std::printf("%10s FAILED: %s\n", name, a.error.c_str());
    }
    r->applies.push_back(std::move(a));
  }
  std::fflush(stdout);
}

// (d)
void RunStages(const BenchOptions& o, const RunState& r) {
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
  const double tcp_s = r.tcp_bps > 0 ? o.apply_bytes / r.tcp_bps : 0;
  std::printf("  sum: push %.1f ms, pull %.1f ms in user space; + %.1f ms each "
              "for the bytes through loopback TCP at (b)'s rate\n",
              push_stage_s * 1e3, pull_stage_s * 1e3, tcp_s * 1e3);
}

// The (a) table's figures the JSON line reports.
struct TableSummary {
  double key_goodput = 0;  // The 64 MB, 2-shard, 1-worker cell's.
  double best_goodput = 0;
  std::string best_cell = "none";
  std::vector<std::string> refused;  // Quoted cell ids.
};

TableSummary SummarizeTable(const std::vector<GoodputCell>& cells) {
  TableSummary t;
  for (const GoodputCell& c : cells) {
    if (c.model_bytes == 64 * kMiB && c.shards == 2 && c.workers == 1 &&
        c.refused.empty()) {
      t.key_goodput = c.goodput;
      break;
    }
  }
  for (const GoodputCell& c : cells) {
    const std::string id = absl::StrCat(c.model_bytes / kMiB, "MB/", c.shards,
                                        "s/", c.workers, "w");
    if (!c.refused.empty()) {
      t.refused.push_back(absl::StrCat("\"", id, "\""));
    } else if (c.goodput > t.best_goodput) {
      t.best_goodput = c.goodput;
      t.best_cell = id;
    }
  }
  return t;
}

// JSON. Ratios use the best TCP trial of the run (r.tcp_bps by now).
void PrintJson(const BenchOptions& o, const RunState& r) {
  const TableSummary table = SummarizeTable(r.cells);
  const ApplyResult* sgd = nullptr;
  const ApplyResult* adagrad = nullptr;
  for (const ApplyResult& a : r.applies) {
    if (a.optimizer == "sgd" && a.error.empty()) sgd = &a;
    if (a.optimizer == "adagrad" && a.error.empty()) adagrad = &a;
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const double sgd_bps = sgd != nullptr ? sgd->store_push : 0;
  const double adagrad_bps = adagrad != nullptr ? adagrad->store_push : 0;
  const LatencyResult& lat = r.lat;
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
      "\"push_pull\":%s,\"push_dtype\":\"%s\",\"pull_dtype\":\"%s\","
      "\"quick\":%s,\"load_before\":\"%s\","
      "\"load_after\":\"%s\",\"seconds\":%.1f}",
      ratio(r.head_best, r.tcp_bps), ratio(sgd_bps, r.memcpy_bps),
      Gbps(r.tcp_bps), Gbps(r.head_best),
      ratio(r.head_median, r.head_tcp_median),
      static_cast<int>(r.head.trial_goodput.size()),
      ratio(table.key_goodput, r.tcp_bps), Gbps(r.span_tcp_bps),
      ratio(r.head_best, r.span_tcp_bps), Gbps(r.two_tcp_bps),
      ratio(r.head_best, r.two_tcp_bps), Gbps(r.memcpy_bps), Gbps(sgd_bps),
      Gbps(r.tcp_end_bps), Gbps(adagrad_bps), ratio(adagrad_bps, r.memcpy_bps),
      Gbps(sgd != nullptr ? sgd->optimizer_only : 0), Gbps(table.best_goodput),
      table.best_cell, lat.pull_p50_us, lat.pull_p99_us, lat.push_p50_us,
      lat.push_p99_us, absl::StrJoin(table.refused, ","),
      o.separate_connections ? "true" : "false",
      static_cast<long long>(o.part_bytes >> 10), o.connections_per_shard,
      o.calls_in_flight, o.push_pull ? "true" : "false",
      wire::EncodingName(o.push_encoding), wire::EncodingName(o.pull_encoding),
      o.quick ? "true" : "false",
      r.load_before, LoadAverage(), SecondsSince(r.t_begin));
  std::printf("\n%s\n", json.c_str());
}

}  // namespace

int RunTransportBench(const BenchOptions& o) {
  RunState r;
  r.t_begin = Clock::now();
  r.load_before = LoadAverage();
  std::printf("transport_bench: %u hardware threads, load average %s (1/5/15 min)\n",
              std::thread::hardware_concurrency(), r.load_before.c_str());
  std::printf("Units: GB/s = 1e9 bytes/s; Gbit/s = 1e9 bits/s. 1 MB model = 1 MiB.\n\n");
  std::fflush(stdout);
  RunTcpReference(o, &r);
  RunHeadline(o, &r);
  RunTcpContext(&r);
  RunGoodputTable(o, &r);
  RunApplyTable(o, &r);
  RunStages(o, r);
  r.tcp_end_bps = TcpTrial(&r);
  std::printf("\n(b) loopback TCP again at the end: %.2f GB/s (%.1f Gbit/s)\n",
              GBps(r.tcp_end_bps), Gbps(r.tcp_end_bps));
  PrintJson(o, r);
  return 0;
}

}  // namespace transport_bench
}  // namespace downpour
