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
//
// Exit status: 0 ok; 2 a bad flag value (abseil itself exits 1 for an
// unknown flag or a --device it cannot parse); 3 the device is not available
// (no GPU or no driver); 1 anything else.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
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
};

struct Measurement {
  int steps = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // This process's CPU time over the same steps.
  float last_loss = 0;
};

struct Row {
  int batch_size = 0;
  Measurement step;
  Measurement compute;
};

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
  return o;
}

// CPU time of the whole process (every thread).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `step(i)` warmup_steps times, then times it as Options says. The clock
// stops after a final Synchronize, so queued device work is counted.
absl::StatusOr<Measurement> Measure(
    const Options& o, Backend* backend,
    const std::function<absl::StatusOr<StepResult>(int)>& step) {
  using Clock = std::chrono::steady_clock;
  int i = 0;
  for (; i < o.warmup_steps; ++i) {
    DP_RETURN_IF_ERROR(step(i).status());
  }
  DP_RETURN_IF_ERROR(backend->Synchronize());
  Measurement m;
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
                                     int batch) {
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
  DP_ASSIGN_OR_RETURN(row.step, Measure(o, backend, worker_step));
  DP_ASSIGN_OR_RETURN(row.compute, Measure(o, backend, compute_step));
  return row;
}

double Ms(const Measurement& m) { return 1e3 * m.seconds / m.steps; }
double CpuMs(const Measurement& m) { return 1e3 * m.cpu_seconds / m.steps; }
double Rate(const Measurement& m, int batch) {
  return static_cast<double>(batch) * m.steps / m.seconds;
}
double CpuRate(const Measurement& m, int batch) {
  return m.cpu_seconds > 0
             ? static_cast<double>(batch) * m.steps / m.cpu_seconds
             : 0.0;
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

// Prints the run's header: what is measured, where, with what.
void PrintHeader(const Options& o, const BenchDevice& dev, int64_t parameters) {
  const std::string cpu =
      dev.cuda ? "" : absl::StrCat(", ", o.device.cpu_threads, " thread(s)");
  std::printf(
      "compute_bench: %s on %s%s, host buffers: %s, %lld parameters, "
      "synthetic input, fp32\n"
      "  step    = parameters H2D + batch H2D + forward + backward + accrue + "
      "gradients D2H (a worker's step, n_fetch = n_push = 1, no RPCs)\n"
      "  compute = batch H2D + forward + backward; CPU columns: compute per "
      "CPU-second of the process\n",
      o.model.c_str(), dev.backend->Name().c_str(), cpu.c_str(),
      dev.host_allocator->Name(), static_cast<long long>(parameters));
  std::printf("%6s | %9s | %12s | %10s | %12s | %8s | %11s | %14s\n", "batch",
              "step ms", "step ex/s", "compute ms", "compute ex/s", "copies %",
              "CPU ms/step", "ex per CPU-sec");
  std::fflush(stdout);
}

absl::Status Run(const Options& o, int* exit_code) {
  DP_ASSIGN_OR_RETURN(BenchDevice dev, OpenDevice(o, exit_code));
  int64_t parameters = 0;
  {
    absl::StatusOr<std::unique_ptr<Model>> probe =
        BuildModel(o.model, dev.backend.get(), 1);
    if (!probe.ok()) {
      if (probe.status().code() == absl::StatusCode::kInvalidArgument) {
        *exit_code = 2;
      }
      return probe.status();
    }
    parameters = (*probe)->num_parameters();
  }
  PrintHeader(o, dev, parameters);
  std::vector<std::string> results;
  for (int batch : o.batch_sizes) {
    DP_ASSIGN_OR_RETURN(Row r, MeasureBatchSize(o, dev, batch));
    const double step_ms = Ms(r.step), compute_ms = Ms(r.compute);
    std::printf("%6d | %9.3f | %12.1f | %10.3f | %12.1f | %8.1f | %11.3f | "
                "%14.1f\n",
                batch, step_ms, Rate(r.step, batch), compute_ms,
                Rate(r.compute, batch),
                100.0 * std::max(0.0, step_ms - compute_ms) / step_ms,
                CpuMs(r.compute), CpuRate(r.compute, batch));
    std::fflush(stdout);
    results.push_back(absl::StrFormat(
        "{\"batch_size\":%d,\"step_ms\":%.5f,\"step_examples_per_sec\":%.2f,"
        "\"compute_ms\":%.5f,\"compute_examples_per_sec\":%.2f,"
        "\"compute_cpu_ms\":%.5f,\"compute_examples_per_cpu_sec\":%.2f,"
        "\"steps\":%d,\"compute_steps\":%d,\"loss\":%.5f}",
        batch, step_ms, Rate(r.step, batch), compute_ms,
        Rate(r.compute, batch), CpuMs(r.compute), CpuRate(r.compute, batch),
        r.step.steps, r.compute.steps, r.step.last_loss));
  }
  // The CUDA backend runs plain fp32 unless --tf32; the CPU backends have no
  // TF32.
  const std::string cpu_fields =
      dev.cuda ? ""
               : absl::StrFormat(",\"cpu_backend\":\"%s\",\"cpu_threads\":%d",
                                 CpuBackendName(o.device.cpu_backend),
                                 o.device.cpu_threads);
  const std::string json = absl::StrFormat(
      "{\"bench\":\"%s_worker_step\",\"impl\":\"downpour\",\"model\":\"%s\","
      "\"device\":\"%s\",\"host_buffers\":\"%s\",\"tf32\":%s,"
      "\"blocking_sync\":%s,\"deterministic\":%s%s,\"input\":\"synthetic\","
      "\"parameters\":%d,"
      "\"results\":[%s]}",
      o.model, o.model, dev.backend->Name(), dev.host_allocator->Name(),
      dev.cuda && o.device.cuda.allow_tf32 ? "true" : "false",
      dev.cuda && o.device.cuda.blocking_sync ? "true" : "false",
      dev.cuda && o.device.cuda.deterministic_conv_algorithms ? "true"
                                                              : "false",
      cpu_fields,
      parameters, absl::StrJoin(results, ","));
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
