// The training, evaluation and job-end driving of ps_worker (worker_job.h).
#include "worker/worker_job.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/report.h"
#include "common/safetensors.h"
#include "common/shard_stats.h"
#include "common/status_macros.h"
#include "worker/data/data.h"
#include "worker/model_files.h"
#include "worker/sandblaster_job.h"
#include "worker/trainer.h"
#include "worker/data/dataset_info.h"

namespace downpour {
namespace {

// Which split to read, converted to `model`'s input and classes.
SplitRequest SplitFor(const WorkerOptions& f, bool train, const Model& model) {
  SplitRequest r;
  r.dataset = f.dataset;
  r.data_dir = f.data_dir;
  r.train = train;
  r.max_examples = train ? f.max_train_examples : f.max_test_examples;
  const Dims in = model.input_dims();
  r.shape = {in.c, in.h, in.w};
  r.num_classes = model.num_classes();
  r.resize = f.input.image_resize;
  return r;
}

// The whole split in memory, converted to `model`'s input (which an image
// folder or a tensor file needs; the IDX and CIFAR-10 readers keep their
// own). Skipped bad images (--skip_bad_images) are added to *bad. When
// `at_most` > 0, at most that many examples are read, chosen as for
// --max_*_examples (a prefix; an evenly spaced subset of a folder's files).
absl::StatusOr<Dataset> LoadSplit(const WorkerOptions& f, bool train,
                                  const Model* model = nullptr,
                                  int64_t* bad = nullptr,
                                  int64_t at_most = 0) {
  SplitRequest r;
  if (model != nullptr) {
    r = SplitFor(f, train, *model);
  } else if (f.dataset == DatasetKind::kImageFolder ||
             f.dataset == DatasetKind::kSafetensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset=", DatasetName(f.dataset), " needs the model's input"));
  } else {
    r.dataset = f.dataset;
    r.data_dir = f.data_dir;
    r.train = train;
    r.max_examples = train ? f.max_train_examples : f.max_test_examples;
  }
  if (at_most > 0 && (r.max_examples <= 0 || r.max_examples > at_most)) {
    r.max_examples = at_most;
  }
  int64_t skipped = 0;
  absl::StatusOr<Dataset> d = downpour::LoadSplit(
      r, f.data_threads, f.input.skip_bad_images, &skipped);
  if (bad != nullptr) *bad += skipped;
  return d;
}

// The per-channel normalization of `channels` channels: the flags' (one
// value for every channel, or one per channel), else the data set's own.
void NormalizationFor(const WorkerOptions& f, int channels,
                      std::vector<float>* mean, std::vector<float>* std_dev) {
  if (!f.input.normalize_mean.empty()) {
    *mean = f.input.normalize_mean;
    *std_dev = f.input.normalize_std;
    if (mean->size() == 1) {
      mean->assign(channels, f.input.normalize_mean[0]);
      std_dev->assign(channels, f.input.normalize_std[0]);
    }
  } else if (f.dataset == DatasetKind::kCifar10) {
    mean->assign(kCifar10Mean, kCifar10Mean + 3);
    std_dev->assign(kCifar10Std, kCifar10Std + 3);
  }
}

// Applies to a split loaded whole (evaluation, batch-norm statistics) the
// per-channel normalization the batcher applies in training.
absl::Status NormalizeLikeTraining(const WorkerOptions& f, Dataset* d) {
  std::vector<float> mean, std_dev;
  NormalizationFor(f, d->channels, &mean, &std_dev);
  if (mean.empty()) return absl::OkStatus();
  if (mean.size() != static_cast<size_t>(d->channels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--normalize_mean has ", mean.size(), " values for ", d->channels,
        " channels"));
  }
  const size_t plane = static_cast<size_t>(d->height) * d->width;
  for (size_t i = 0; i < d->images.size(); ++i) {
    const size_t c = i / plane % static_cast<size_t>(d->channels);
    d->images[i] = (d->images[i] - mean[c]) / std_dev[c];
  }
  return absl::OkStatus();
}

DoneReport PrintDoneWith(int w, const TrainResult& r, int64_t bad_images,
                         const std::function<void(DoneReport*)>& more);

DoneReport PrintDone(int w, const TrainResult& r, int64_t bad_images) {
  return PrintDoneWith(w, r, bad_images, nullptr);
}

// The DONE line, with `more`'s members (null: none).
DoneReport PrintDoneWith(int w, const TrainResult& r, int64_t bad_images,
                         const std::function<void(DoneReport*)>& more) {
  std::printf("worker %d: finished %lld steps (%lld examples) in %.1f s; "
              "time %s: %s\n", w, static_cast<long long>(r.steps),
              static_cast<long long>(r.examples), r.seconds,
              r.total.Shares().c_str(), r.total.Verdict().c_str());
  DoneReport d;
  d.worker = w;
  d.steps = r.steps;
  d.examples = r.examples;
  d.pushes = r.pushes;
  d.final_loss = r.final_loss;
  d.seconds = r.seconds;
  d.time_data = r.total.data;
  d.time_compute = r.total.compute;
  d.time_pull = r.total.pull;
  d.time_push = r.total.push;
  d.verdict = r.total.Verdict();
  d.bad_images = bad_images;
  if (more) more(&d);
  std::printf("%s\n", FormatDoneLine(d).c_str());
  std::fflush(stdout);
  return d;
}

// One batcher per replica over `train`, which must outlive them.
absl::StatusOr<std::vector<std::unique_ptr<Batcher>>> MakeBatchers(
    const WorkerOptions& f, const ExampleSource* train, int R,
    HostAllocator* allocator) {
  const int w = f.client.worker_id;
  std::vector<std::unique_ptr<Batcher>> batchers;
  for (int r = 0; r < R; ++r) {
    BatcherOptions bo;
    const DataShard shard = ReplicaShard(w, f.num_workers, r, R);
    bo.worker_index = shard.index;
    bo.num_workers = shard.count;
    bo.batch_size = f.batch_size;
    bo.epochs = f.epochs;
    bo.seed = f.seed;
    bo.prefetch = f.prefetch;
    bo.num_threads = f.data_threads;
    bo.allocator = allocator;
    bo.augment = AugmentFor(f.augment, f.augment_crop_padding);
    bo.skip_bad_examples = f.input.skip_bad_images;
    NormalizationFor(f, train->channels(), &bo.normalize_mean,
                     &bo.normalize_std);
    DP_ASSIGN_OR_RETURN(std::unique_ptr<Batcher> b, Batcher::Create(train, bo));
    batchers.push_back(std::move(b));
  }
  return batchers;
}

// The progress callback of worker `id`: a PROGRESS line, and the metrics.
std::function<void(const Progress&)> ProgressPrinter(
    std::shared_ptr<WorkerMetrics> metrics, int id) {
  return [id, metrics](const Progress& p) {
    if (metrics != nullptr) metrics->OnProgress(id, p);
    WorkerProgress line;
    line.worker = id;
    line.step = p.step;
    line.loss = p.loss;
    line.examples_per_sec = p.examples_per_sec;
    line.sec_per_batch = p.sec_per_batch;
    line.shares = p.window.Shares();
    std::printf("%s\n", FormatProgressLine(line).c_str());
    std::fflush(stdout);
  };
}

// Independent replicas (--local_aggregation=none): R Downpour workers in
// this process, one thread and one client each; their results summed.
absl::StatusOr<TrainResult> RunIndependentReplicas(
    const WorkerOptions& f, const TrainerOptions& to, ReplicaSet& set,
    std::vector<std::unique_ptr<ParameterClient>>& clients,
    std::vector<std::unique_ptr<Batcher>>& batchers) {
  const int w = f.client.worker_id;
  const int R = static_cast<int>(set.models.size());
  std::vector<absl::StatusOr<TrainResult>> results(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    threads.emplace_back([&, r] {
      results[r] = RunDownpourWorker(to, set.models[r].get(), clients[r].get(),
                                     batchers[r].get(),
                                     ProgressPrinter(f.metrics, w * R + r));
    });
  }
  for (std::thread& t : threads) t.join();
  TrainResult all;
  for (int r = 0; r < R; ++r) {
    if (!results[r].ok()) return results[r].status();
    all.steps += results[r]->steps;
    all.examples += results[r]->examples;
    all.pushes += results[r]->pushes;
    all.final_loss += results[r]->final_loss / R;
    all.seconds = std::max(all.seconds, results[r]->seconds);
    all.total += results[r]->total;
  }
  return all;
}

// --mode=sandblaster (worker/sandblaster_job.h): the whole training split,
// the first replica, portions from the chief's coordinator.
absl::Status TrainSandblaster(
    const WorkerOptions& f, ReplicaSet& set,
    std::vector<std::unique_ptr<ParameterClient>>& clients, DoneReport* done) {
  const int w = f.client.worker_id;
  int64_t bad = 0;
  DP_ASSIGN_OR_RETURN(Dataset train,
                      LoadSplit(f, true, set.models[0].get(), &bad));
  DP_RETURN_IF_ERROR(NormalizeLikeTraining(f, &train));
  SandblasterJobOptions o;
  o.worker_id = w;
  o.num_workers = f.num_workers;
  o.sandblaster = f.sandblaster;
  o.epochs = f.epochs;
  o.seed = f.seed;
  o.compute_batch = f.batch_size;
  o.ps_hosts = f.client.hosts;
  o.security = f.client.security;
  o.rpc_timeout = f.client.rpc_timeout;
  if (f.spec.has_value()) o.coordinator_listen = f.spec->SelfAddress();
  o.debug_step_delay = f.trainer.debug_step_delay;
  o.stop_requested = f.trainer.stop_requested;
  o.log = [w](const std::string& m) {
    std::printf("worker %d: %s\n", w, m.c_str());
    std::fflush(stdout);
  };
  std::printf("worker %d: sandblaster over %lld training examples, backend "
              "%s\n", w, static_cast<long long>(train.size),
              set.models[0]->backend()->Name().c_str());
  DP_ASSIGN_OR_RETURN(
      const SandblasterJobResult r,
      RunSandblaster(o, set.models[0].get(), clients[0].get(), train));
  TrainResult tr;
  tr.steps = r.batches;
  tr.examples = r.examples;
  tr.pushes = r.portions;
  tr.final_loss = static_cast<float>(r.final_loss);
  tr.seconds = r.seconds;
  std::printf("worker %d: %lld portions used, %lld backup portions lost the "
              "race\n", w, static_cast<long long>(r.portions),
              static_cast<long long>(r.backup_portions));
  if (r.iterations >= 0) {
    std::printf("worker %d: sandblaster: %lld iterations, %lld evaluations "
                "(%lld in line searches), loss %.6f\n", w,
                static_cast<long long>(r.iterations),
                static_cast<long long>(r.evaluations),
                static_cast<long long>(r.line_search_evaluations),
                r.final_loss);
  }
  DoneReport d = PrintDoneWith(w, tr, bad, [&r](DoneReport* d) {
    d->portions = r.portions;
    d->backup_portions = r.backup_portions;
    d->iterations = r.iterations;
    d->line_search_evaluations = r.line_search_evaluations;
  });
  *done = d;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTrainingData(
    const WorkerOptions& f, const Model& model) {
  DP_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> train,
                      OpenSplit(SplitFor(f, true, model)));
  // Batches are copied to the model as input_dims() floats per example: a
  // data set of another shape is refused before the first step.
  const Dims in = model.input_dims();
  if (train->channels() != in.c || train->height() != in.h ||
      train->width() != in.w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model \"", f.model, "\" takes ", in.c, "x", in.h, "x", in.w,
        " inputs, but --dataset=", DatasetName(f.dataset), " in ", f.data_dir,
        " has ", train->channels(), "x", train->height(), "x", train->width(),
        " images"));
  }
  return train;
}

absl::Status Train(const WorkerOptions& f, ReplicaSet& set,
                   std::unique_ptr<ExampleSource> train,
                   std::vector<std::unique_ptr<ParameterClient>>& clients,
                   DoneReport* done) {
  if (f.trainer.mode == TrainMode::kSandblaster) {
    return TrainSandblaster(f, set, clients, done);
  }
  const int w = f.client.worker_id;
  const int R = static_cast<int>(set.models.size());
  DP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Batcher>> batchers,
                      MakeBatchers(f, train.get(), R, set.allocator()));
  // A batcher that failed (an unreadable image) ended its data early: the
  // job fails with its error rather than reporting a short run.
  auto input_result = [&batchers](int64_t* bad) {
    for (const std::unique_ptr<Batcher>& b : batchers) {
      DP_RETURN_IF_ERROR(b->status());
      *bad += b->bad_examples();
    }
    return absl::OkStatus();
  };
  int64_t bad = 0;
  std::printf("worker %d: %d replica%s (%s) over %lld training examples, "
              "%lld batches/epoch each, backend %s\n", w, R, R == 1 ? "" : "s",
              R == 1 ? "one worker"
                     : (f.local_sum ? "gradients summed here, one push"
                                    : "each its own worker"),
              static_cast<long long>(train->size()),
              static_cast<long long>(batchers[0]->BatchesPerEpoch()),
              set.models[0]->backend()->Name().c_str());
  std::fflush(stdout);
  TrainerOptions to = f.trainer;
  to.host_allocator = set.allocator();
  if (f.local_sum || R == 1) {
    std::vector<Replica> group;
    for (int r = 0; r < R; ++r) {
      group.push_back({set.models[r].get(), batchers[r].get()});
    }
    DP_ASSIGN_OR_RETURN(
        TrainResult r, RunDownpourWorker(to, group, clients[0].get(),
                                         ProgressPrinter(f.metrics, w)));
    DP_RETURN_IF_ERROR(input_result(&bad));
    *done = PrintDone(w, r, bad);
    return absl::OkStatus();
  }
  DP_ASSIGN_OR_RETURN(TrainResult all,
                      RunIndependentReplicas(f, to, set, clients, batchers));
  DP_RETURN_IF_ERROR(input_result(&bad));
  *done = PrintDone(w, all, bad);
  return absl::OkStatus();
}

absl::Status Eval(const WorkerOptions& f, Model* model, ParameterClient* client,
                  ChiefRecord* record) {
  int64_t bad_test_images = 0;
  DP_ASSIGN_OR_RETURN(
      Dataset test, LoadSplit(f, false, model, &bad_test_images));
  DP_RETURN_IF_ERROR(NormalizeLikeTraining(f, &test));
  if (bad_test_images > 0) {
    std::printf("eval: skipped %lld bad images\n",
                static_cast<long long>(bad_test_images));
  }
  std::vector<float> params(model->num_parameters());
  std::vector<int64_t> versions;
  DP_RETURN_IF_ERROR(client->Pull(absl::MakeSpan(params), &versions));
  DP_RETURN_IF_ERROR(model->SetParameters(params));
  if (model->state_size() > 0 && f.bn_stats_examples > 0) {
    // Batch norm's running statistics for these parameters
    // (worker/model_files.h), from only the examples they use.
    DP_ASSIGN_OR_RETURN(Dataset train, LoadSplit(f, true, model, nullptr,
                                                 f.bn_stats_examples));
    DP_RETURN_IF_ERROR(NormalizeLikeTraining(f, &train));
    DP_RETURN_IF_ERROR(
        RecomputeStatistics(model, train, f.bn_stats_examples));
  }
  DP_ASSIGN_OR_RETURN(EvalResult r, EvaluateModel(model, test));
  int64_t updates = 0;
  for (int64_t v : versions) updates += v;
  std::printf("eval: test accuracy = %.4f, loss = %.4f on %lld examples "
              "(%lld chunk updates applied)\n",
              r.accuracy, r.loss, static_cast<long long>(r.examples),
              static_cast<long long>(updates));
  std::printf("%s\n",
              FormatEvalLine({r.accuracy, r.loss, r.examples}).c_str());
  DP_ASSIGN_OR_RETURN(std::vector<ShardStats> stats, client->Stats());
  for (const ShardStats& s : stats) {
    std::printf("%s\n", FormatServerStatsLine(s).c_str());
  }
  if (record != nullptr) {
    record->eval = {r.accuracy, r.loss, r.examples};
    record->stats = stats;
  }
  if (!f.save_params.empty()) {
    DP_RETURN_IF_ERROR(SaveModel(
        f.save_params, *model, params,
        {{"format", "downpour"},
         {"model", f.model},
         {"chunk_updates", absl::StrCat(updates)},
         {"test_accuracy", absl::StrFormat("%.5f", r.accuracy)}}));
    std::printf("eval: parameters saved to %s\n", f.save_params.c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

// The end of a job from a cluster spec (worker/job_end.h).
absl::Status EndSpecJob(const WorkerOptions& f, const absl::Status& trained,
                        const DoneReport& done, Model* model,
                        ParameterClient* client) {
  DP_ASSIGN_OR_RETURN(std::unique_ptr<JobEndClient> job,
                      JobEndClient::Create(f.client.hosts, f.client.security,
                                           f.client.rpc_timeout,
                                           f.client.standby_hosts));
  const int w = f.client.worker_id;
  if (w != 0) {
    const absl::Status reported =
        job->ReportWorkerDone(w, trained, FormatDoneLine(done));
    DP_RETURN_IF_ERROR(trained);
    return reported;
  }
  ChiefRecord record;
  record.mode = f.trainer.mode;
  record.servers = static_cast<int>(f.client.hosts.size());
  record.workers = f.num_workers;
  record.epochs = f.epochs;
  record.batch_size = f.batch_size;
  record.chief_done = done;
  absl::Status s = trained;
  if (s.ok()) {
    std::printf("worker 0: chief: waiting for the other workers\n");
    std::fflush(stdout);
    absl::StatusOr<JobReports> others = job->WaitForWorkers(0, f.job_wait_timeout);
    if (others.ok()) record.others = *others;
    s = !others.ok() ? others.status()
        : others->errors.empty()
            ? absl::OkStatus()
            : absl::AbortedError(absl::StrJoin(others->errors, "; "));
  }
  if (s.ok()) s = Eval(f, model, client, &record);
  if (s.ok()) {
    record.wall_seconds = absl::ToDoubleSeconds(absl::Now() - f.started);
    const std::string json = ChiefSummaryJson(record);
    std::printf("SUMMARY %s\n", json.c_str());
    if (!f.summary_json.empty()) {
      std::ofstream out(f.summary_json, std::ios::trunc);
      out << json << "\n";
      if (!out.good()) {
        s = absl::InternalError(absl::StrCat("cannot write --summary_json ",
                                             f.summary_json));
      }
    }
  }
  std::printf("worker 0: chief: ending the job (%s)\n",
              s.ok() ? "succeeded" : s.ToString().c_str());
  std::fflush(stdout);
  const absl::Status ended = job->EndJob(0, s.ok() ? "" : s.ToString());
  DP_RETURN_IF_ERROR(s);
  return ended;
}

}  // namespace downpour
