// File: tests/bench/cpu_bench_main.cc
//
// CPU compute benchmark: examples/sec of fashion_cnn's forward +
// backward on one CPU backend, the per-step work of tests/bench/
// pytorch_fashion_cnn.py's "compute" row (batch into backend memory,
// forward, backward, loss). tests/bench/cpu_bench.sh runs it beside PyTorch
// and prints the ratios.
//
//   bazel run -c opt //tests/bench:cpu_bench -- --cpu_backend=onednn \
//       --threads=1 --batch_sizes=64,256,1024
//
// The last line of stdout is JSON:
//   {"bench":"fashion_cnn_cpu_compute","impl":"downpour","backend":"onednn",
//    "threads":1,"results":[{"batch_size":64,"compute_ms":..,
//    "compute_examples_per_sec":..,"compute_cpu_ms":..,
//    "compute_examples_per_cpu_sec":..,"steps":..,"loss":..},...]}
// "cpu" figures divide by the process's CPU time instead of wall time: at
// one thread, the speed of a core of its own even on a loaded machine.
// Exit status: 0 ok; 2 bad flags; 1 anything else.
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/onednn_backend.h"
#include "worker/nn/openblas_backend.h"

ABSL_FLAG(std::string, cpu_backend, "onednn", "onednn or openblas.");
ABSL_FLAG(int, threads, 1, "Backend threads.");
ABSL_FLAG(bool, onednn_winograd, true,
          "--cpu_backend=onednn: Winograd convolutions where they apply "
          "(false: direct convolution only).");
ABSL_FLAG(std::string, batch_sizes, "64,256,1024", "Comma-separated.");
ABSL_FLAG(int, warmup_steps, 5, "Untimed steps per batch size.");
ABSL_FLAG(double, min_seconds, 2.0, "Timed seconds per batch size (at least).");
ABSL_FLAG(int, min_steps, 5, "Timed steps per batch size (at least).");

namespace downpour {
namespace {

struct Row {
  int batch = 0;
  int steps = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // This process's CPU time over the same steps.
  float loss = 0;
};

// CPU time of the whole process (every thread). At one thread it is the
// time the step would take on a core of its own: it leaves out the time the
// process waited for a core on a loaded machine.
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

absl::StatusOr<Row> MeasureBatch(Backend* backend, int batch) {
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      BuildModel("fashion_cnn", backend, batch));
  DP_RETURN_IF_ERROR(model->SetParameters(model->InitialParameters(1)));
  constexpr int kPool = 4;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  std::vector<float> xs(int64_t{kPool} * batch * 784);
  for (float& v : xs) v = pixel(rng);
  std::vector<int32_t> ys(int64_t{kPool} * batch);
  for (int32_t& y : ys) y = static_cast<int32_t>(rng() % 10);
  Row row;
  row.batch = batch;
  auto step = [&](int i) -> absl::Status {
    const int k = i % kPool;
    DP_ASSIGN_OR_RETURN(StepResult r,
                        model->ComputeGradients(&xs[int64_t{k} * batch * 784],
                                                &ys[int64_t{k} * batch], batch));
    row.loss = r.loss;
    return absl::OkStatus();
  };
  int i = 0;
  for (; i < absl::GetFlag(FLAGS_warmup_steps); ++i) DP_RETURN_IF_ERROR(step(i));
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  while (true) {
    row.seconds = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    if (row.steps >= absl::GetFlag(FLAGS_min_steps) &&
        row.seconds >= absl::GetFlag(FLAGS_min_seconds)) {
      break;
    }
    DP_RETURN_IF_ERROR(step(i++));
    ++row.steps;
  }
  row.cpu_seconds = ProcessCpuSeconds() - cpu0;
  if (!std::isfinite(row.loss)) {
    return absl::InternalError("loss is not finite: the computation is broken");
  }
  return row;
}

absl::Status Run(int* exit_code) {
  const std::string kind = absl::GetFlag(FLAGS_cpu_backend);
  const int threads = absl::GetFlag(FLAGS_threads);
  std::vector<int> batches;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(s, &b) || b <= 0) {
      *exit_code = 2;
      return absl::InvalidArgumentError(absl::StrCat("bad batch size '", s, "'"));
    }
    batches.push_back(b);
  }
  std::unique_ptr<Backend> backend;
  if (kind == "onednn") {
    OnednnOptions options;
    options.threads = threads;
    options.winograd = absl::GetFlag(FLAGS_onednn_winograd);
    DP_ASSIGN_OR_RETURN(backend, NewOnednnBackend(options));
  } else if (kind == "openblas") {
    backend = NewOpenblasBackend(threads);
  } else {
    *exit_code = 2;
    return absl::InvalidArgumentError(absl::StrCat(
        "--cpu_backend must be onednn or openblas, got '", kind, "'"));
  }
  std::printf("cpu_bench: fashion_cnn forward+backward, backend %s, %d "
              "thread(s)\n%6s | %10s | %12s | %12s | %16s\n",
              backend->Name().c_str(), threads, "batch", "compute ms",
              "compute ex/s", "CPU ms/step", "ex per CPU-sec");
  std::vector<std::string> json;
  for (int b : batches) {
    DP_ASSIGN_OR_RETURN(Row r, MeasureBatch(backend.get(), b));
    const double ms = 1e3 * r.seconds / r.steps;
    const double eps = b * r.steps / r.seconds;
    const double cpu_ms = 1e3 * r.cpu_seconds / r.steps;
    const double cpu_eps = b * r.steps / r.cpu_seconds;
    std::printf("%6d | %10.3f | %12.1f | %12.3f | %16.1f\n", b, ms, eps,
                cpu_ms, cpu_eps);
    std::fflush(stdout);
    json.push_back(absl::StrCat(
        "{\"batch_size\":", b, ",\"compute_ms\":", ms,
        ",\"compute_examples_per_sec\":", eps, ",\"compute_cpu_ms\":",
        cpu_ms, ",\"compute_examples_per_cpu_sec\":", cpu_eps,
        ",\"steps\":", r.steps,
        ",\"loss\":", r.loss, "}"));
  }
  std::printf("{\"bench\":\"fashion_cnn_cpu_compute\",\"impl\":\"downpour\","
              "\"backend\":\"%s\",\"threads\":%d,\"results\":[%s]}\n",
              kind.c_str(), threads, absl::StrJoin(json, ",").c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int exit_code = 1;
  const absl::Status s = downpour::Run(&exit_code);
  if (!s.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(s.message()).c_str());
    return exit_code;
  }
  return 0;
}
