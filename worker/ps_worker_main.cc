// ps_worker: one Downpour worker replica, or (--task=eval) the evaluation of
// the parameters the servers hold.
//
//   ps_worker --ps_hosts=10.0.0.1:5000,10.0.0.2:5000 --worker_index=0 \
//             --num_workers=4 --epochs=3
//   ps_worker --task=eval --ps_hosts=... --save_params=model.safetensors
//
// Every flag is read here and turned into options structs; nothing below main
// reads a flag.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/safetensors.h"
#include "common/shard_stats.h"
#include "common/status_macros.h"
#include "worker/data/data.h"
#include "worker/grpc_ps_client.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, ps_hosts, "",
          "Comma-separated host:port of parameter-server shards 0..S-1.");
ABSL_FLAG(int, worker_index, 0, "This worker's index, 0 <= index < num_workers.");
ABSL_FLAG(int, num_workers, 1, "Number of workers in the job.");
ABSL_FLAG(std::string, task, "train", "train, or eval (test accuracy of the "
          "servers' parameters, optionally --save_params).");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Folder with the IDX files (train-images-idx3-ubyte.gz, ...).");
ABSL_FLAG(std::string, model, "fashion_cnn", "Model architecture.");
ABSL_FLAG(std::string, device, "auto",
          "auto, cpu or cuda. auto uses the CPU backend while no CUDA backend "
          "is built in.");
ABSL_FLAG(std::string, mode, "async",
          "async, sync or ssp: how this worker waits (match the servers).");
ABSL_FLAG(int, epochs, 1, "Passes over this worker's shard of the data.");
ABSL_FLAG(int, batch_size, 64, "Examples per minibatch.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial parameters and shuffling.");
ABSL_FLAG(int, n_fetch, 1, "Pull parameters every n_fetch steps.");
ABSL_FLAG(int, n_push, 1, "Push accrued gradients every n_push steps.");
ABSL_FLAG(double, local_lr, 0.01,
          "Learning rate of the local step between fetches (n_fetch > 1).");
ABSL_FLAG(int64_t, max_train_examples, 0, "Use only the first N training "
          "examples (0: all).");
ABSL_FLAG(int64_t, max_test_examples, 0, "Evaluate only the first N test "
          "examples (0: all).");
ABSL_FLAG(int64_t, max_steps, 0, "Stop after N steps (0: after --epochs).");
ABSL_FLAG(int, log_every, 50, "Print progress every N steps.");
ABSL_FLAG(int64_t, max_chunk_bytes, 1 << 20, "Largest parameter chunk.");
ABSL_FLAG(int, cpu_threads, 1, "OpenBLAS threads of the CPU backend.");
ABSL_FLAG(int, prefetch, 4, "Batches prepared ahead by the input thread.");
ABSL_FLAG(double, rpc_timeout_s, 60, "Deadline of one pull or push.");
ABSL_FLAG(double, connect_timeout_s, 60, "How long to wait for the servers.");
ABSL_FLAG(int, debug_step_delay_ms, 0,
          "Testing only: sleep this long in every step, to play a straggler.");
ABSL_FLAG(std::string, save_params, "",
          "--task=eval: write the parameters to this safetensors file.");

namespace downpour {
namespace {

struct WorkerFlags {
  GrpcClientOptions client;
  int num_workers = 1;
  std::string task, data_dir, model, device, save_params;
  int batch_size = 64, epochs = 1, cpu_threads = 1, prefetch = 4;
  uint64_t seed = 1;
  int64_t max_train_examples = 0, max_test_examples = 0, max_chunk_bytes = 0;
  TrainerOptions trainer;
};

absl::StatusOr<WorkerFlags> ReadFlags() {
  WorkerFlags f;
  const std::string hosts = absl::GetFlag(FLAGS_ps_hosts);
  if (hosts.empty()) return absl::InvalidArgumentError("--ps_hosts is required");
  f.client.hosts = absl::StrSplit(hosts, ',', absl::SkipEmpty());
  f.client.worker_id = absl::GetFlag(FLAGS_worker_index);
  f.client.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  f.client.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  f.num_workers = absl::GetFlag(FLAGS_num_workers);
  f.task = absl::GetFlag(FLAGS_task);
  f.data_dir = absl::GetFlag(FLAGS_data_dir);
  f.model = absl::GetFlag(FLAGS_model);
  f.device = absl::GetFlag(FLAGS_device);
  f.save_params = absl::GetFlag(FLAGS_save_params);
  f.batch_size = absl::GetFlag(FLAGS_batch_size);
  f.epochs = absl::GetFlag(FLAGS_epochs);
  f.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  f.prefetch = absl::GetFlag(FLAGS_prefetch);
  f.seed = absl::GetFlag(FLAGS_seed);
  f.max_train_examples = absl::GetFlag(FLAGS_max_train_examples);
  f.max_test_examples = absl::GetFlag(FLAGS_max_test_examples);
  f.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  f.trainer.n_fetch = absl::GetFlag(FLAGS_n_fetch);
  f.trainer.n_push = absl::GetFlag(FLAGS_n_push);
  f.trainer.local_lr = static_cast<float>(absl::GetFlag(FLAGS_local_lr));
  f.trainer.log_every = absl::GetFlag(FLAGS_log_every);
  f.trainer.max_steps = absl::GetFlag(FLAGS_max_steps);
  f.trainer.debug_step_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_debug_step_delay_ms));

  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "async") {
    f.trainer.mode = TrainMode::kAsync;
  } else if (mode == "sync") {
    f.trainer.mode = TrainMode::kSync;
  } else if (mode == "ssp") {
    f.trainer.mode = TrainMode::kSsp;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode must be async, sync or ssp, got '", mode, "'"));
  }
  if (f.task != "train" && f.task != "eval") {
    return absl::InvalidArgumentError(
        absl::StrCat("--task must be train or eval, got '", f.task, "'"));
  }
  if (f.num_workers < 1 || f.client.worker_id < 0 ||
      f.client.worker_id >= f.num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "need 0 <= --worker_index < --num_workers, got %d and %d",
        f.client.worker_id, f.num_workers));
  }
  if (f.batch_size < 1 || f.epochs < 0 || f.trainer.n_fetch < 1 ||
      f.trainer.n_push < 1 || f.max_chunk_bytes < 4 || f.prefetch < 1) {
    return absl::InvalidArgumentError(
        "--batch_size, --n_fetch, --n_push, --prefetch must be >= 1, "
        "--epochs >= 0, --max_chunk_bytes >= 4");
  }
  if (f.device == "cuda") {
    return absl::UnimplementedError(
        "--device=cuda: this build has no CUDA backend yet; use --device=cpu "
        "or auto");
  }
  if (f.device != "auto" && f.device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, got '", f.device, "'"));
  }
  return f;
}

absl::Status Train(const WorkerFlags& f, Model* model, ParameterClient* client) {
  const int w = f.client.worker_id;
  DP_ASSIGN_OR_RETURN(Dataset train,
                      LoadMnistSplit(f.data_dir, true, f.max_train_examples));
  BatcherOptions bo;
  bo.worker_index = w;
  bo.num_workers = f.num_workers;
  bo.batch_size = f.batch_size;
  bo.epochs = f.epochs;
  bo.seed = f.seed;
  bo.prefetch = f.prefetch;
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Batcher> batcher, Batcher::Create(&train, bo));
  std::printf("worker %d: shard %d of %d over %lld training examples, "
              "%lld batches/epoch, backend %s\n", w, w, f.num_workers,
              static_cast<long long>(train.size),
              static_cast<long long>(batcher->BatchesPerEpoch()),
              model->backend()->Name().c_str());
  std::fflush(stdout);
  DP_ASSIGN_OR_RETURN(
      TrainResult r,
      RunDownpourWorker(f.trainer, model, client, batcher.get(),
                        [w](const Progress& p) {
                          std::printf(
                              "worker %d: step %lld, loss = %.3f (%.1f "
                              "examples/sec; %.3f sec/batch) %s\n",
                              w, static_cast<long long>(p.step), p.loss,
                              p.examples_per_sec, p.sec_per_batch,
                              p.window.Shares().c_str());
                          std::fflush(stdout);
                        }));
  std::printf("worker %d: finished %lld steps (%lld examples) in %.1f s; "
              "time %s: %s\n", w, static_cast<long long>(r.steps),
              static_cast<long long>(r.examples), r.seconds,
              r.total.Shares().c_str(), r.total.Verdict().c_str());
  std::printf(
      "DONE {\"worker\":%d,\"steps\":%lld,\"examples\":%lld,\"pushes\":%lld,"
      "\"final_loss\":%.5f,\"seconds\":%.3f,\"time_data\":%.3f,"
      "\"time_compute\":%.3f,\"time_pull\":%.3f,\"time_push\":%.3f,"
      "\"verdict\":\"%s\"}\n",
      w, static_cast<long long>(r.steps), static_cast<long long>(r.examples),
      static_cast<long long>(r.pushes), r.final_loss, r.seconds, r.total.data,
      r.total.compute, r.total.pull, r.total.push, r.total.Verdict().c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Eval(const WorkerFlags& f, Model* model, ParameterClient* client) {
  DP_ASSIGN_OR_RETURN(Dataset test,
                      LoadMnistSplit(f.data_dir, false, f.max_test_examples));
  std::vector<float> params(model->num_parameters());
  std::vector<int64_t> versions;
  DP_RETURN_IF_ERROR(client->Pull(absl::MakeSpan(params), &versions));
  DP_RETURN_IF_ERROR(model->SetParameters(params));
  DP_ASSIGN_OR_RETURN(EvalResult r, EvaluateModel(model, test));
  int64_t updates = 0;
  for (int64_t v : versions) updates += v;
  std::printf("eval: test accuracy = %.4f, loss = %.4f on %lld examples "
              "(%lld chunk updates applied)\n",
              r.accuracy, r.loss, static_cast<long long>(r.examples),
              static_cast<long long>(updates));
  std::printf("EVAL {\"test_accuracy\":%.5f,\"test_loss\":%.5f,\"examples\":%lld}\n",
              r.accuracy, r.loss, static_cast<long long>(r.examples));
  DP_ASSIGN_OR_RETURN(std::vector<ShardStats> stats, client->Stats());
  for (const ShardStats& s : stats) {
    std::printf("SERVER_STATS %s\n", ShardStatsToJson(s).c_str());
  }
  if (!f.save_params.empty()) {
    DP_RETURN_IF_ERROR(WriteSafetensors(
        f.save_params, model->param_specs(), params,
        {{"format", "downpour"},
         {"model", f.model},
         {"chunk_updates", absl::StrCat(updates)},
         {"test_accuracy", absl::StrFormat("%.5f", r.accuracy)}}));
    std::printf("eval: parameters saved to %s\n", f.save_params.c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Run() {
  DP_ASSIGN_OR_RETURN(WorkerFlags f, ReadFlags());
  // The device is chosen here, in main, and passed down.
  std::unique_ptr<Backend> backend = NewCpuBackend(f.cpu_threads);
  if (f.device == "auto") {
    std::printf("worker %d: --device=auto: using the CPU backend (no CUDA "
                "backend in this build)\n", f.client.worker_id);
  }
  const int max_batch = f.task == "eval" ? 500 : f.batch_size;
  DP_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      BuildModel(f.model, backend.get(), max_batch));
  DP_ASSIGN_OR_RETURN(std::unique_ptr<ParameterClient> client,
                      NewGrpcParameterClient(f.client));
  DP_RETURN_IF_ERROR(DeclareModel(client.get(), *model, f.seed,
                                  static_cast<int>(f.client.hosts.size()),
                                  f.max_chunk_bytes));
  return f.task == "train" ? Train(f, model.get(), client.get())
                           : Eval(f, model.get(), client.get());
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour worker replica (or --task=eval). See README.md.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = downpour::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "ps_worker %d: error: %s\n",
                 absl::GetFlag(FLAGS_worker_index), s.ToString().c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
