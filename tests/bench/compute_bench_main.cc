// compute_bench: examples/sec of one Downpour worker's compute step, without
// the network, on the CPU (oneDNN or OpenBLAS backend) or a GPU.
//
//   bazel run -c opt //tests/bench:compute_bench -- --device=cuda --gpu=0
//   compute_bench --device=cpu --cpu_backend=openblas --cpu_threads=2
//
// Two figures per batch size, each the mean over the timed steps after
// --warmup_steps untimed ones:
//   step     what worker/trainer.cc does per step with n_fetch = n_push = 1,
//            less the RPCs: copy the parameters host -> device
//            (Model::SetParameters), copy the batch host -> device, forward,
//            backward (Model::ComputeGradients), accrue the gradients
//            (Axpy), copy them device -> host (CopyToHost), zero the accrual
//            (Fill).
//   compute  Model::ComputeGradients alone (batch host -> device, forward,
//            backward, loss), then Synchronize. Also per CPU-second of the
//            process: at one thread, the speed of a core of its own, which a
//            loaded machine distorts less than wall time.
// All host buffers (parameters, gradients, a pool of --pool_batches input
// batches) come from the device's host allocator: page-locked for CUDA. The
// input is synthetic (uniform [0, 1) pixels, uniform labels): the kernels do
// the same work on any data. tests/bench/pytorch_fashion_cnn.py measures the
// same figures in PyTorch; tests/bench/compute_bench.sh runs both on one
// device with the ratios, tests/bench/cpu_bench.sh the CPU grid (threads,
// backends, PyTorch's allocator settings).
//
// The flags: --device, --cpu_backend, --cpu_threads, --cuda_blocking_sync and
// --cuda_deterministic as ps_worker takes them (worker/backend_flags.h),
// --model and --seed as ps_worker's (worker/training_flags.h), the step
// timing and --batch_sizes (tests/bench/bench_flags.h), and this benchmark's
// own below.
//
// --copies=W runs W copies of the measurement at once, each in a process of
// its own (forked before the device opens), as W workers on one machine:
// the rates are their sum, the times their mean. --lockstep also makes
// every copy begin each timed step together (a barrier across the
// processes, tests/bench/process_copies.h), as a sync job's workers do:
// each step waits for the slowest copy, and all the computes run at the
// same moments. That is the most W sync workers' compute can give on this
// machine, with no exchange at all (tests/bench/compute_limit.sh compares
// the sync job with it). --lockstep needs --steps, so that every copy
// takes as many steps, and puts copy i on the i-th CPU this process may
// use (when there are at least W): unpinned, a copy woken by the barrier
// is often placed on the CPU of the copy that woke it, and the two share
// that CPU until the scheduler moves one (on the 2-core machine, 10% of
// the lockstep rate, docs/results.md).
//
// Prints a table, then one JSON line (last line of stdout, also written to
// --json_out):
//   {"bench":"fashion_cnn_worker_step","impl":"downpour","model":..,
//    "device":..,"host_buffers":..,"tf32":false,"blocking_sync":false,
//    "deterministic":false,
//    "cpu_backend":..,"cpu_threads":.. (CPU only),"input":"synthetic",
//    "parameters":N,
//    "results":[{"batch_size":64,"step_ms":..,"step_examples_per_sec":..,
//                "compute_ms":..,"compute_examples_per_sec":..,
//                "compute_cpu_ms":..,"compute_examples_per_cpu_sec":..,
//                "steps":..,"compute_steps":..,"loss":..},...]}
// With --copies > 1 the top level also has "copies":W,"lockstep":..,
// "pinned":.. (each copy on a CPU of its own); each
// result "compute_examples_per_sec_per_copy":[..] and "lockstep_wait_ms"
// (per step, the mean over the copies, of the compute figure: time spent
// waiting for the others, included in compute_ms); the "per CPU-second"
// figures are over every copy's CPU time.
//
// Exit status: 0 ok; 2 a bad flag value (abseil itself exits 1 for an
// unknown flag or a --device it cannot parse); 3 the device is not available
// (no GPU or no driver); 1 anything else.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/host_allocator.h"
#include "common/status_macros.h"
#include "tests/bench/bench_device.h"
#include "tests/bench/bench_flags.h"
#include "tests/bench/process_copies.h"
#include "worker/backend_flags.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_kind.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/training_flags.h"

ABSL_FLAG(int, gpu, 0, "CUDA device ordinal (--device=cuda or auto).");
ABSL_FLAG(int, steps, 0,
          "Timed steps per measurement; 0 = as many as fit in --min_seconds "
          "(at least --min_steps).");
ABSL_FLAG(int, pool_batches, 8,
          "Distinct input batches cycled through (host memory).");
ABSL_FLAG(int64_t, workspace_limit_mb, -1,
          "CUDA: cuDNN workspace limit in MiB; < 0 = the backend's default.");
ABSL_FLAG(bool, tf32, false,
          "CUDA: allow TF32 tensor-core math in cuBLAS and cuDNN "
          "(CudaBackendOptions::allow_tf32).");
ABSL_FLAG(bool, onednn_winograd, true,
          "--cpu_backend=onednn: Winograd convolutions where they apply "
          "(false: direct convolution only).");
ABSL_FLAG(std::string, json_out, "", "Also write the JSON line here.");
ABSL_FLAG(int, copies, 1,
          "Run this many copies of the measurement at once, each in a process "
          "of its own (as that many workers on this machine); the rates are "
          "their sum.");
ABSL_FLAG(bool, lockstep, false,
          "With --copies > 1: every copy begins each timed step together, as "
          "a sync job's workers do. Needs --steps.");

namespace downpour {
namespace {

struct Options {
  BenchDeviceOptions device;
  std::string model;
  std::vector<int> batch_sizes;
  int warmup_steps = 0;
  int steps = 0;
  double min_seconds = 0;
  int min_steps = 1;
  int pool_batches = 8;
  uint64_t seed = 1;
  std::string json_out;
  int copies = 1;
  bool lockstep = false;
  bool pinned = false;  // Set by RunCopies: each copy on a CPU of its own.
};

struct Measurement {
  int steps = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // This process's CPU time over the same steps.
  double gate_seconds = 0;  // Waiting for the other copies (--lockstep).
  float last_loss = 0;
};

struct Row {
  int batch_size = 0;
  Measurement step;
  Measurement compute;
};

constexpr int kMaxCopies = 64;
constexpr int kMaxBatchSizes = 16;

absl::StatusOr<Options> ReadFlags() {
  DP_ASSIGN_OR_RETURN(const BackendFlags backend, BackendFlagsFromFlags());
  DP_ASSIGN_OR_RETURN(const TrainingFlags training, TrainingFlagsFromFlags());
  DP_ASSIGN_OR_RETURN(const BenchFlags bench, BenchFlagsFromFlags());
  Options o;
  o.device.device = backend.device;
  o.device.gpu = absl::GetFlag(FLAGS_gpu);
  const int64_t ws_mb = absl::GetFlag(FLAGS_workspace_limit_mb);
  if (ws_mb >= 0) o.device.cuda.workspace_limit_bytes = ws_mb << 20;
  o.device.cuda.allow_tf32 = absl::GetFlag(FLAGS_tf32);
  o.device.cuda.blocking_sync = backend.cuda_blocking_sync;
  o.device.cuda.deterministic_conv_algorithms = backend.cuda_deterministic;
  o.device.cpu_backend = backend.cpu_backend;
  o.device.cpu_threads = backend.cpu_threads;
  o.device.onednn_winograd = absl::GetFlag(FLAGS_onednn_winograd);
  o.model = training.model;
  o.seed = training.seed;
  o.batch_sizes = bench.batch_sizes;
  o.warmup_steps = bench.warmup_steps;
  o.min_seconds = bench.min_seconds;
  o.min_steps = bench.min_steps;
  o.steps = absl::GetFlag(FLAGS_steps);
  o.pool_batches = absl::GetFlag(FLAGS_pool_batches);
  if (o.steps < 0 || o.pool_batches < 1) {
    return absl::InvalidArgumentError(
        "need --steps >= 0 and --pool_batches >= 1");
  }
  o.json_out = absl::GetFlag(FLAGS_json_out);
  o.copies = absl::GetFlag(FLAGS_copies);
  o.lockstep = absl::GetFlag(FLAGS_lockstep);
  if (o.copies < 1 || o.copies > kMaxCopies) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--copies must be in [1, ", kMaxCopies, "], got ", o.copies));
  }
  if (o.lockstep && (o.copies < 2 || o.steps < 1)) {
    return absl::InvalidArgumentError(
        "--lockstep needs --copies >= 2 and --steps >= 1 (every copy must "
        "take as many steps)");
  }
  if (o.copies > 1 &&
      o.batch_sizes.size() > static_cast<size_t>(kMaxBatchSizes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--copies > 1 takes at most ", kMaxBatchSizes, " --batch_sizes"));
  }
  return o;
}

// CPU time of the whole process (every thread).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Where a copy meets the others (--copies): before its timed steps, and with
// --lockstep before each of them. Neither without copies.
struct StepGate {
  ProcessCopies* copies = nullptr;  // Not owned.
  bool each_step = false;
};

// Runs `step(i)` warmup_steps times, then times it as Options says. The clock
// stops after a final Synchronize, so queued device work is counted.
absl::StatusOr<Measurement> Measure(
    const Options& o, Backend* backend, const StepGate& gate,
    const std::function<absl::StatusOr<StepResult>(int)>& step) {
  using Clock = std::chrono::steady_clock;
  int i = 0;
  for (; i < o.warmup_steps; ++i) {
    DP_RETURN_IF_ERROR(step(i).status());
  }
  DP_RETURN_IF_ERROR(backend->Synchronize());
  Measurement m;
  if (gate.copies != nullptr) gate.copies->Gate();  // The copies start together.
  const Clock::time_point begin = Clock::now();
  const double cpu_begin = ProcessCpuSeconds();
  while (true) {
    if (o.steps > 0) {
      if (m.steps >= o.steps) break;
    } else if (m.steps >= o.min_steps &&
               std::chrono::duration<double>(Clock::now() - begin).count() >=
                   o.min_seconds) {
      break;
    }
    if (gate.each_step) {
      const Clock::time_point arrived = Clock::now();
      gate.copies->Gate();
      m.gate_seconds +=
          std::chrono::duration<double>(Clock::now() - arrived).count();
    }
    DP_ASSIGN_OR_RETURN(StepResult r, step(i++));
    m.last_loss = r.loss;
    ++m.steps;
  }
  DP_RETURN_IF_ERROR(backend->Synchronize());
  m.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  m.cpu_seconds = ProcessCpuSeconds() - cpu_begin;
  if (!std::isfinite(m.last_loss)) {
    return absl::InternalError(
        absl::StrCat("loss is ", m.last_loss, ": the computation is broken"));
  }
  return m;
}

// `n` elements of host staging memory from the device's host allocator. A
// failure (pinned memory runs out long before pageable memory does) says
// which buffer and how to make it fit.
template <typename T>
absl::StatusOr<HostArray<T>> HostBuffer(const BenchDevice& dev,
                                        const char* what, size_t n) {
  absl::StatusOr<HostArray<T>> a = HostArray<T>::Create(dev.host_allocator, n);
  if (!a.ok()) {
    return absl::Status(
        a.status().code(),
        absl::StrCat("host buffer for the ", what, " (", n, " elements): ",
                     a.status().message(),
                     "; try smaller --batch_sizes or --pool_batches"));
  }
  return a;
}

absl::StatusOr<Row> MeasureBatchSize(const Options& o, const BenchDevice& dev,
                                     int batch, const StepGate& gate) {
  Backend* const backend = dev.backend.get();
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      BuildModel(o.model, backend, batch));
  const int64_t n = model->num_parameters();
  const int64_t example = model->input_dims().Size();
  const int classes = model->num_classes();

  // Host staging memory, as a worker holds it.
  DP_ASSIGN_OR_RETURN(HostArray<float> params,
                      HostBuffer<float>(dev, "parameters", n));
  DP_ASSIGN_OR_RETURN(HostArray<float> grads,
                      HostBuffer<float>(dev, "gradients", n));
  DP_ASSIGN_OR_RETURN(
      HostArray<float> images,
      HostBuffer<float>(dev, "input images",
                        static_cast<size_t>(o.pool_batches) * batch * example));
  DP_ASSIGN_OR_RETURN(
      HostArray<int32_t> labels,
      HostBuffer<int32_t>(dev, "input labels",
                          static_cast<size_t>(o.pool_batches) * batch));
  const std::vector<float> init = model->InitialParameters(o.seed);
  std::copy(init.begin(), init.end(), params.begin());
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, classes - 1);
  for (float& v : images) v = pixel(rng);
  for (int32_t& v : labels) v = label(rng);
  DP_ASSIGN_OR_RETURN(DeviceBuffer accrued, DeviceBuffer::Create(backend, n));

  auto batch_x = [&](int i) {
    return images.data() + static_cast<size_t>(i % o.pool_batches) * batch * example;
  };
  auto batch_y = [&](int i) {
    return labels.data() + static_cast<size_t>(i % o.pool_batches) * batch;
  };

  // trainer.cc's step with n_fetch = n_push = 1, the RPCs left out.
  auto worker_step = [&](int i) -> absl::StatusOr<StepResult> {
    DP_RETURN_IF_ERROR(
        model->SetParameters(absl::MakeConstSpan(params.data(), n)));
    DP_ASSIGN_OR_RETURN(StepResult r,
                        model->ComputeGradients(batch_x(i), batch_y(i), batch));
    DP_RETURN_IF_ERROR(
        backend->Axpy(n, 1.0f, model->gradients(), accrued.data()));
    DP_RETURN_IF_ERROR(backend->CopyToHost(accrued.data(), grads.data(), n));
    DP_RETURN_IF_ERROR(backend->Fill(accrued.data(), n, 0.0f));
    return r;
  };
  auto compute_step = [&](int i) -> absl::StatusOr<StepResult> {
    DP_ASSIGN_OR_RETURN(StepResult r,
                        model->ComputeGradients(batch_x(i), batch_y(i), batch));
    DP_RETURN_IF_ERROR(backend->Synchronize());
    return r;
  };

  DP_RETURN_IF_ERROR(model->SetParameters(absl::MakeConstSpan(params.data(), n)));
  Row row;
  row.batch_size = batch;
  DP_ASSIGN_OR_RETURN(row.step, Measure(o, backend, gate, worker_step));
  DP_ASSIGN_OR_RETURN(row.compute, Measure(o, backend, gate, compute_step));
  return row;
}

double Ms(const Measurement& m) { return 1e3 * m.seconds / m.steps; }
double CpuMs(const Measurement& m) { return 1e3 * m.cpu_seconds / m.steps; }
double Rate(const Measurement& m, int batch) {
  return static_cast<double>(batch) * m.steps / m.seconds;
}
absl::StatusOr<BenchDevice> OpenDevice(const Options& o, int* exit_code) {
  absl::StatusOr<BenchDevice> dev = OpenBenchDevice(o.device);
  if (!dev.ok()) {
    const absl::StatusCode c = dev.status().code();
    if (c == absl::StatusCode::kFailedPrecondition) *exit_code = 3;
    if (c == absl::StatusCode::kInvalidArgument) *exit_code = 2;
    return absl::Status(c, absl::StrCat("--device=",
                                        DeviceKindName(o.device.device), ": ",
                                        dev.status().message()));
  }
  if (!dev->note.empty()) {
    std::fprintf(stderr, "compute_bench: %s\n", dev->note.c_str());
  }
  return dev;
}

// The model's parameter count (a bad --model exits 2).
absl::StatusOr<int64_t> Parameters(const Options& o, const BenchDevice& dev,
                                   int* exit_code) {
  absl::StatusOr<std::unique_ptr<Model>> probe =
      BuildModel(o.model, dev.backend.get(), 1);
  if (!probe.ok()) {
    if (probe.status().code() == absl::StatusCode::kInvalidArgument) {
      *exit_code = 2;
    }
    return probe.status();
  }
  return (*probe)->num_parameters();
}

// What the header and the JSON line say of the device.
struct DeviceInfo {
  std::string backend;
  std::string host_buffers;
  bool cuda = false;
  int64_t parameters = 0;
};

DeviceInfo InfoOf(const BenchDevice& dev, int64_t parameters) {
  return {dev.backend->Name(), dev.host_allocator->Name(), dev.cuda,
          parameters};
}

// Prints the run's header: what is measured, where, with what.
void PrintHeader(const Options& o, const DeviceInfo& dev) {
  const std::string cpu =
      dev.cuda ? "" : absl::StrCat(", ", o.device.cpu_threads, " thread(s)");
  const std::string copies =
      o.copies == 1
          ? ""
          : absl::StrCat(", ", o.copies, " copies at once",
                         o.lockstep ? ", each step begun together" : "",
                         o.pinned ? ", each on a CPU of its own" : "");
  std::printf(
      "compute_bench: %s on %s%s%s, host buffers: %s, %lld parameters, "
      "synthetic input, fp32\n"
      "  step    = parameters H2D + batch H2D + forward + backward + accrue + "
      "gradients D2H (a worker's step, n_fetch = n_push = 1, no RPCs)\n"
      "  compute = batch H2D + forward + backward; CPU columns: compute per "
      "CPU-second of the process\n",
      o.model.c_str(), dev.backend.c_str(), cpu.c_str(), copies.c_str(),
      dev.host_buffers.c_str(), static_cast<long long>(dev.parameters));
  if (o.copies > 1) {
    std::printf(
        "  with copies: ex/s summed over them, ms and CPU ms per step their "
        "mean%s\n",
        o.lockstep ? "; wait = compute ms spent waiting for the others" : "");
  }
  std::printf("%6s | %9s | %12s | %10s | %12s | %8s | %11s | %14s%s\n",
              "batch", "step ms", "step ex/s", "compute ms", "compute ex/s",
              "copies %", "CPU ms/step", "ex per CPU-sec",
              o.copies > 1 ? " | wait ms | compute ex/s per copy" : "");
  std::fflush(stdout);
}

// One batch size's figures over its copies (one without --copies): prints
// its table line and returns its JSON object.
std::string PrintRow(const Options& o, const std::vector<Row>& copies) {
  const int batch = copies.front().batch_size;
  const double n = static_cast<double>(copies.size());
  double step_ms = 0, step_rate = 0, compute_ms = 0, compute_rate = 0;
  double cpu_ms = 0, cpu_seconds = 0, wait_ms = 0;
  int64_t steps = 0, compute_steps = 0;
  std::vector<std::string> per_copy;
  for (const Row& r : copies) {
    step_ms += Ms(r.step) / n;
    step_rate += Rate(r.step, batch);
    compute_ms += Ms(r.compute) / n;
    compute_rate += Rate(r.compute, batch);
    cpu_ms += CpuMs(r.compute) / n;
    cpu_seconds += r.compute.cpu_seconds;
    wait_ms += 1e3 * r.compute.gate_seconds / r.compute.steps / n;
    steps += r.step.steps;
    compute_steps += r.compute.steps;
    per_copy.push_back(absl::StrFormat("%.2f", Rate(r.compute, batch)));
  }
  const double cpu_rate =
      cpu_seconds > 0 ? static_cast<double>(batch) * compute_steps / cpu_seconds
                      : 0.0;
  const std::string more =
      o.copies == 1 ? ""
                    : absl::StrFormat(" | %7.3f | %s", wait_ms,
                                      absl::StrJoin(per_copy, ", "));
  std::printf("%6d | %9.3f | %12.1f | %10.3f | %12.1f | %8.1f | %11.3f | "
              "%14.1f%s\n",
              batch, step_ms, step_rate, compute_ms, compute_rate,
              100.0 * std::max(0.0, step_ms - compute_ms) / step_ms, cpu_ms,
              cpu_rate, more.c_str());
  std::fflush(stdout);
  const std::string more_json =
      o.copies == 1
          ? ""
          : absl::StrFormat(
                ",\"compute_examples_per_sec_per_copy\":[%s],"
                "\"lockstep_wait_ms\":%.5f",
                absl::StrJoin(per_copy, ","), wait_ms);
  return absl::StrFormat(
      "{\"batch_size\":%d,\"step_ms\":%.5f,\"step_examples_per_sec\":%.2f,"
      "\"compute_ms\":%.5f,\"compute_examples_per_sec\":%.2f,"
      "\"compute_cpu_ms\":%.5f,\"compute_examples_per_cpu_sec\":%.2f,"
      "\"steps\":%d,\"compute_steps\":%d,\"loss\":%.5f%s}",
      batch, step_ms, step_rate, compute_ms, compute_rate, cpu_ms, cpu_rate,
      steps, compute_steps, copies.front().step.last_loss, more_json);
}

// Prints the JSON line (and writes --json_out).
absl::Status PrintJson(const Options& o, const DeviceInfo& dev,
                       const std::vector<std::string>& results) {
  // The CUDA backend runs plain fp32 unless --tf32; the CPU backends have no
  // TF32.
  const std::string cpu_fields =
      dev.cuda ? ""
               : absl::StrFormat(",\"cpu_backend\":\"%s\",\"cpu_threads\":%d",
                                 CpuBackendName(o.device.cpu_backend),
                                 o.device.cpu_threads);
  const std::string copies_fields =
      o.copies == 1 ? ""
                    : absl::StrFormat(
                          ",\"copies\":%d,\"lockstep\":%s,\"pinned\":%s",
                          o.copies, o.lockstep ? "true" : "false",
                          o.pinned ? "true" : "false");
  const std::string json = absl::StrFormat(
      "{\"bench\":\"%s_worker_step\",\"impl\":\"downpour\",\"model\":\"%s\","
      "\"device\":\"%s\",\"host_buffers\":\"%s\",\"tf32\":%s,"
      "\"blocking_sync\":%s,\"deterministic\":%s%s%s,\"input\":\"synthetic\","
      "\"parameters\":%d,"
      "\"results\":[%s]}",
      o.model, o.model, dev.backend, dev.host_buffers,
      dev.cuda && o.device.cuda.allow_tf32 ? "true" : "false",
      dev.cuda && o.device.cuda.blocking_sync ? "true" : "false",
      dev.cuda && o.device.cuda.deterministic_conv_algorithms ? "true"
                                                              : "false",
      cpu_fields, copies_fields, dev.parameters,
      absl::StrJoin(results, ","));
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << json << "\n";
    if (!f.good()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write --json_out=", o.json_out));
    }
  }
  return absl::OkStatus();
}

// A copy's results, in memory its parent reads (plain bytes).
struct CopySlot {
  int exit_code = 0;
  char error[512] = {};
  char backend[64] = {};
  char host_buffers[64] = {};
  bool cuda = false;
  int64_t parameters = 0;
  int rows = 0;
  Row row[kMaxBatchSizes];
};
static_assert(std::is_trivially_copyable_v<CopySlot>);

void CopyString(const std::string& from, char* to, size_t size) {
  std::snprintf(to, size, "%s", from.c_str());
}

// In a copy: opens the device and measures every batch size into *slot.
absl::Status MeasureCopy(const Options& o, ProcessCopies* copies,
                         CopySlot* slot, int* exit_code) {
  DP_ASSIGN_OR_RETURN(BenchDevice dev, OpenDevice(o, exit_code));
  DP_ASSIGN_OR_RETURN(slot->parameters, Parameters(o, dev, exit_code));
  CopyString(dev.backend->Name(), slot->backend, sizeof(slot->backend));
  CopyString(dev.host_allocator->Name(), slot->host_buffers,
             sizeof(slot->host_buffers));
  slot->cuda = dev.cuda;
  for (int batch : o.batch_sizes) {
    DP_ASSIGN_OR_RETURN(slot->row[slot->rows],
                        MeasureBatchSize(o, dev, batch,
                                         StepGate{copies, o.lockstep}));
    ++slot->rows;
  }
  return absl::OkStatus();
}

// --copies > 1: forks the copies (before any device opens), then prints
// what they measured.
absl::Status RunCopies(Options o, int* exit_code) {
  // The CPUs the copies may use, in order (for --lockstep's placement).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  o.pinned = o.lockstep && static_cast<int>(cpus.size()) >= o.copies;
  DP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessCopies> copies,
                      ProcessCopies::Fork(o.copies, sizeof(CopySlot)));
  if (copies->index() >= 0) {
    CopySlot* slot = new (copies->slot(copies->index())) CopySlot();
    if (o.pinned) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[copies->index()], &one);
      sched_setaffinity(0, sizeof(one), &one);  // Before any thread starts.
    }
    int code = 1;
    const absl::Status s = MeasureCopy(o, copies.get(), slot, &code);
    if (s.ok()) copies->ExitCopy(0);
    CopyString(std::string(s.message()), slot->error, sizeof(slot->error));
    slot->exit_code = code;
    copies->ExitCopy(code);
  }
  const absl::Status waited = copies->WaitAll(exit_code);
  std::vector<CopySlot> slots(o.copies);
  for (int i = 0; i < o.copies; ++i) {
    std::memcpy(&slots[i], copies->slot(i), sizeof(CopySlot));
  }
  if (!waited.ok()) {
    // The copy that failed said why; the others were stopped.
    for (const CopySlot& s : slots) {
      if (s.exit_code != 0) {
        *exit_code = s.exit_code;
        return absl::UnknownError(s.error);
      }
    }
    return waited;
  }
  const DeviceInfo dev{slots[0].backend, slots[0].host_buffers, slots[0].cuda,
                       slots[0].parameters};
  PrintHeader(o, dev);
  std::vector<std::string> results;
  for (size_t b = 0; b < o.batch_sizes.size(); ++b) {
    std::vector<Row> rows;
    for (const CopySlot& s : slots) rows.push_back(s.row[b]);
    results.push_back(PrintRow(o, rows));
  }
  return PrintJson(o, dev, results);
}

absl::Status Run(const Options& o, int* exit_code) {
  if (o.copies > 1) return RunCopies(o, exit_code);
  DP_ASSIGN_OR_RETURN(BenchDevice dev, OpenDevice(o, exit_code));
  DP_ASSIGN_OR_RETURN(const int64_t parameters,
                      Parameters(o, dev, exit_code));
  const DeviceInfo info = InfoOf(dev, parameters);
  PrintHeader(o, info);
  std::vector<std::string> results;
  for (int batch : o.batch_sizes) {
    DP_ASSIGN_OR_RETURN(Row r, MeasureBatchSize(o, dev, batch, StepGate()));
    results.push_back(PrintRow(o, {r}));
  }
  return PrintJson(o, info, results);
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Examples/sec of a Downpour worker's compute step, without the "
      "network.\n  compute_bench --device=cuda --gpu=0 "
      "--batch_sizes=64,256,1024\n  compute_bench --device=cpu "
      "--cpu_backend=onednn --cpu_threads=1");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "compute_bench: unexpected argument '%s'\n",
                 positional[1]);
    return 2;
  }
  absl::StatusOr<downpour::Options> options = downpour::ReadFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "compute_bench: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  int exit_code = 1;
  absl::Status s = downpour::Run(*options, &exit_code);
  if (!s.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "compute_bench: %s\n", std::string(s.message()).c_str());
    return exit_code;
  }
  return 0;
}
