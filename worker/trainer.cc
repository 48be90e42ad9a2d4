#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace downpour {

std::string PhaseTimes::Shares() const {
  const double t = std::max(Total(), 1e-12);
  return absl::StrFormat("[data %.0f%% compute %.0f%% pull %.0f%% push %.0f%%]",
                         100 * data / t, 100 * compute / t, 100 * pull / t,
                         100 * push / t);
}

std::string PhaseTimes::Verdict() const {
  const double t = std::max(Total(), 1e-12);
  if (data / t > 0.25) return "input-bound";
  if ((pull + push) / t > 0.5) return "communication-bound";
  return "compute-bound";
}

absl::Status DeclareModel(ParameterClient* client, const Model& model,
                          uint64_t seed, int num_shards,
                          int64_t max_chunk_bytes) {
  ModelLayout layout;
  layout.tensors = model.param_specs();
  layout.num_shards = num_shards;
  layout.max_chunk_bytes = max_chunk_bytes;
  return client->Declare(layout, model.InitialParameters(seed));
}

namespace {

// Seconds since `start`, and resets it to now.
double Lap(absl::Time* start) {
  const absl::Time now = absl::Now();
  const double s = absl::ToDoubleSeconds(now - *start);
  *start = now;
  return s;
}

// Runs one job at a time on its own thread: Start() hands a job over, Wait()
// blocks until it finished and returns its status. Used for the background
// push/pull (overlap) and for the replicas beyond the first.
class JobThread {
 public:
  JobThread() : thread_([this] { Loop(); }) {}
  ~JobThread() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  // Precondition: idle (no job started since the last Wait).
  void Start(std::function<absl::Status()> job) {
    absl::MutexLock l(&mu_);
    job_ = std::move(job);
    busy_ = true;
    done_ = false;
  }
  absl::Status Wait() {
    absl::MutexLock l(&mu_);
    if (!busy_) return absl::OkStatus();
    mu_.Await(absl::Condition(&done_));
    busy_ = false;
    return status_;
  }
  // True when a started job has finished (Wait will not block).
  bool Finished() {
    absl::MutexLock l(&mu_);
    return busy_ && done_;
  }

 private:
  void Loop() {
    while (true) {
      std::function<absl::Status()> job;
      {
        absl::MutexLock l(&mu_);
        auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return stop_ || (job_ != nullptr);
        };
        mu_.Await(absl::Condition(&ready));
        if (job_ == nullptr) return;
        job = std::move(job_);
        job_ = nullptr;
      }
      absl::Status s = job();
      absl::MutexLock l(&mu_);
      status_ = std::move(s);
      done_ = true;
    }
  }

  absl::Mutex mu_;
  std::function<absl::Status()> job_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Parameters as pulled, with the version of each chunk.
struct Snapshot {
  HostArray<float> params;
  std::vector<int64_t> versions;
};

}  // namespace

absl::StatusOr<TrainResult> RunDownpourWorker(
    const TrainerOptions& options, Model* model, ParameterClient* client,
    Batcher* batcher, const std::function<void(const Progress&)>& on_progress) {
  const Replica one{model, batcher};
  return RunDownpourWorker(options, absl::MakeConstSpan(&one, 1), client,
                           on_progress);
}

absl::StatusOr<TrainResult> RunDownpourWorker(
    const TrainerOptions& options, absl::Span<const Replica> replicas,
    ParameterClient* client,
    const std::function<void(const Progress&)>& on_progress) {
  if (options.n_fetch < 1 || options.n_push < 1) {
    return absl::InvalidArgumentError("n_fetch and n_push must be >= 1");
  }
  if (options.mode == TrainMode::kSync &&
      (options.n_fetch != 1 || options.n_push != 1)) {
    return absl::InvalidArgumentError(
        "sync mode pushes and fetches every step: use n_fetch = n_push = 1");
  }
  if (replicas.empty()) return absl::InvalidArgumentError("no replicas");
  const int num_replicas = static_cast<int>(replicas.size());
  const int64_t n = replicas[0].model->num_parameters();
  for (const Replica& r : replicas) {
    if (r.model == nullptr || r.batcher == nullptr ||
        r.model->num_parameters() != n) {
      return absl::InvalidArgumentError(
          "every replica needs a model of the same size and a batcher");
    }
  }
  HostAllocator* alloc = options.host_allocator != nullptr
                             ? options.host_allocator
                             : DefaultHostAllocator();
  // Host staging: the parameters in use and, with overlap, the ones being
  // pulled; the gradient being assembled and, with overlap, the one being
  // pushed; one copy-out buffer per extra replica.
  Snapshot current{HostArray<float>(alloc, n), {}};
  Snapshot incoming{HostArray<float>(alloc, options.overlap ? n : 0), {}};
  HostArray<float> grads(alloc, n), sending(alloc, options.overlap ? n : 0);
  std::vector<HostArray<float>> replica_grads;
  for (int r = 1; r < num_replicas; ++r) replica_grads.emplace_back(alloc, n);
  std::vector<DeviceBuffer> accrued;
  for (const Replica& r : replicas) {
    DP_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(r.model->backend(), n));
    accrued.push_back(std::move(b));
  }
  std::vector<std::unique_ptr<JobThread>> helpers;
  for (int r = 1; r < num_replicas; ++r) {
    helpers.push_back(std::make_unique<JobThread>());
  }
  JobThread comm;
  bool incoming_pull = false;  // The background job ends with a pull.

  TrainResult result;
  PhaseTimes window;
  double window_loss = 0;
  int64_t window_steps = 0, window_examples = 0;
  int64_t seq = 0, accrued_steps = 0;
  bool logged_window = false;
  const absl::Time begin = absl::Now();
  absl::Time window_begin = begin;
  absl::Time t = begin;

  // What a pull waits for, given the versions the last push was based on.
  auto pull_options = [&](const std::vector<int64_t>& pushed_from) {
    PullOptions wait;
    if (options.mode == TrainMode::kSync && !pushed_from.empty() && seq > 0) {
      wait.min_version = pushed_from[0] + 1;  // The step after it.
    } else if (options.mode == TrainMode::kSsp) {
      wait.worker_clock = seq;
    }
    return wait;
  };
  auto load = [&](Snapshot& s) -> absl::Status {
    for (const Replica& r : replicas) {
      DP_RETURN_IF_ERROR(r.model->SetParameters(
          absl::MakeConstSpan(s.params.data(), s.params.size())));
    }
    if (&s != &current) {
      std::swap(current.params, s.params);
      std::swap(current.versions, s.versions);
    }
    return absl::OkStatus();
  };
  // The mean over replicas of their accrued gradients, into `grads`.
  auto gather_gradients = [&]() -> absl::Status {
    DP_RETURN_IF_ERROR(replicas[0].model->backend()->CopyToHost(
        accrued[0].data(), grads.data(), n));
    for (int r = 1; r < num_replicas; ++r) {
      DP_RETURN_IF_ERROR(replicas[r].model->backend()->CopyToHost(
          accrued[r].data(), replica_grads[r - 1].data(), n));
    }
    if (num_replicas > 1) {
      const float scale = 1.0f / static_cast<float>(num_replicas);
      float* __restrict g = grads.data();
      for (int r = 1; r < num_replicas; ++r) {
        const float* __restrict o = replica_grads[r - 1].data();
        for (int64_t i = 0; i < n; ++i) g[i] += o[i];
      }
      for (int64_t i = 0; i < n; ++i) g[i] *= scale;
    }
    for (int r = 0; r < num_replicas; ++r) {
      DP_RETURN_IF_ERROR(
          replicas[r].model->backend()->Fill(accrued[r].data(), n, 0.0f));
    }
    accrued_steps = 0;
    return absl::OkStatus();
  };
  // Pushes `grads` now (no overlap, or the final push).
  auto push_now = [&]() -> absl::Status {
    DP_RETURN_IF_ERROR(gather_gradients());
    DP_RETURN_IF_ERROR(client->Push(++seq, absl::MakeConstSpan(grads.data(), n),
                                    current.versions));
    ++result.pushes;
    return absl::OkStatus();
  };

  // First parameters: always a plain pull.
  DP_RETURN_IF_ERROR(client->Pull(absl::MakeSpan(current.params.data(), n),
                                  &current.versions, PullOptions()));
  DP_RETURN_IF_ERROR(load(current));
  window.pull += Lap(&t);

  int epoch = 0;
  std::vector<std::optional<Batch>> batches(num_replicas);
  std::vector<StepResult> step(num_replicas);
  while (options.max_steps == 0 || result.steps < options.max_steps) {
    t = absl::Now();
    bool exhausted = false;
    for (int r = 0; r < num_replicas; ++r) {
      batches[r] = replicas[r].batcher->Next();
      if (!batches[r].has_value()) exhausted = true;
    }
    if (exhausted) break;
    epoch = batches[0]->epoch;
    window.data += Lap(&t);

    if (result.steps > 0 && result.steps % options.n_fetch == 0) {
      if (!options.overlap) {
        DP_RETURN_IF_ERROR(client->Pull(absl::MakeSpan(current.params.data(), n),
                                        &current.versions,
                                        pull_options(current.versions)));
        DP_RETURN_IF_ERROR(load(current));
      } else if (incoming_pull &&
                 (options.mode == TrainMode::kSync || comm.Finished())) {
        // Sync needs this step's parameters; async/ssp take them if here.
        DP_RETURN_IF_ERROR(comm.Wait());
        incoming_pull = false;
        DP_RETURN_IF_ERROR(load(incoming));
      }
      window.pull += Lap(&t);
    }

    // Every replica's step, in parallel.
    auto compute = [&](int r) -> absl::Status {
      Model* m = replicas[r].model;
      DP_ASSIGN_OR_RETURN(step[r], m->ComputeGradients(batches[r]->images.data(),
                                                       batches[r]->labels.data(),
                                                       batches[r]->size));
      DP_RETURN_IF_ERROR(
          m->backend()->Axpy(n, 1.0f, m->gradients(), accrued[r].data()));
      if (options.n_fetch > 1 && options.local_lr > 0) {
        DP_RETURN_IF_ERROR(m->backend()->Axpy(n, -options.local_lr,
                                              m->gradients(), m->parameters()));
      }
      return absl::OkStatus();
    };
    for (int r = 1; r < num_replicas; ++r) {
      helpers[r - 1]->Start([&compute, r] { return compute(r); });
    }
    absl::Status first = compute(0);
    for (int r = 1; r < num_replicas; ++r) {
      absl::Status s = helpers[r - 1]->Wait();
      if (first.ok()) first = s;
    }
    DP_RETURN_IF_ERROR(first);
    float loss = 0;
    int examples = 0;
    for (int r = 0; r < num_replicas; ++r) {
      if (!std::isfinite(step[r].loss)) {
        return absl::InternalError(absl::StrFormat(
            "training diverged: loss is %f at step %d (replica %d); lower the "
            "learning rate", step[r].loss, result.steps, r));
      }
      loss += step[r].loss / num_replicas;
      examples += batches[r]->size;
    }
    if (options.debug_step_delay > absl::ZeroDuration()) {
      absl::SleepFor(options.debug_step_delay);
    }
    ++accrued_steps;
    ++result.steps;
    result.examples += examples;
    window_loss += loss;
    ++window_steps;
    window_examples += examples;
    window.compute += Lap(&t);

    if (result.steps % options.n_push == 0) {
      if (!options.overlap) {
        DP_RETURN_IF_ERROR(push_now());
      } else {
        // One exchange in flight: finish the previous one (keeping its
        // parameters for the next fetch), then hand this one over.
        DP_RETURN_IF_ERROR(comm.Wait());
        DP_RETURN_IF_ERROR(gather_gradients());
        std::swap(grads, sending);
        const int64_t push_seq = ++seq;
        ++result.pushes;
        const bool fetch_next = result.steps % options.n_fetch == 0 ||
                                options.n_fetch == 1;
        if (incoming_pull && fetch_next) {
          // An earlier pull not used yet: take it now, as this exchange's
          // pull will write over it.
          DP_RETURN_IF_ERROR(load(incoming));
          incoming_pull = false;
        }
        std::vector<int64_t> base = current.versions;
        const PullOptions wait = pull_options(base);
        incoming_pull = incoming_pull || fetch_next;
        comm.Start([&, push_seq, base = std::move(base), wait, fetch_next]() {
          if (!fetch_next) {
            return client->Push(push_seq,
                                absl::MakeConstSpan(sending.data(), n), base);
          }
          // One exchange: each part's values come back right after its push.
          return client->PushPull(push_seq,
                                  absl::MakeConstSpan(sending.data(), n), base,
                                  absl::MakeSpan(incoming.params.data(), n),
                                  &incoming.versions, wait);
        });
      }
      window.push += Lap(&t);
    }

    if (options.log_every > 0 && result.steps % options.log_every == 0) {
      const double secs = absl::ToDoubleSeconds(absl::Now() - window_begin);
      Progress p;
      p.step = result.steps;
      p.epoch = epoch;
      p.loss = static_cast<float>(window_loss / window_steps);
      p.examples_per_sec = window_examples / std::max(secs, 1e-9);
      p.sec_per_batch = secs / window_steps;
      p.window = window;
      if (on_progress) on_progress(p);
      result.final_loss = p.loss;
      logged_window = true;
      result.total += window;
      window = PhaseTimes();
      window_loss = 0;
      window_steps = window_examples = 0;
      window_begin = absl::Now();
    }
  }
  t = absl::Now();
  DP_RETURN_IF_ERROR(comm.Wait());
  if (accrued_steps > 0) DP_RETURN_IF_ERROR(push_now());
  window.push += Lap(&t);
  DP_RETURN_IF_ERROR(client->Leave());
  if (window_steps > 0 && (!logged_window || window_steps * 2 >= options.log_every)) {
    result.final_loss = static_cast<float>(window_loss / window_steps);
  }
  result.total += window;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  return result;
}

absl::StatusOr<EvalResult> EvaluateModel(Model* model, const Dataset& data) {
  if (data.ExampleSize() != model->input_dims().Size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data examples have %d values, the model expects %d",
        data.ExampleSize(), model->input_dims().Size()));
  }
  EvalResult out;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < data.size; i += model->max_batch()) {
    const int b = static_cast<int>(std::min<int64_t>(model->max_batch(), data.size - i));
    DP_ASSIGN_OR_RETURN(StepResult r,
                        model->Evaluate(data.images.data() + i * data.ExampleSize(),
                                        data.labels.data() + i, b));
    loss_sum += static_cast<double>(r.loss) * b;
    correct += r.correct;
  }
  out.examples = data.size;
  if (data.size > 0) {
    out.accuracy = static_cast<double>(correct) / data.size;
    out.loss = loss_sum / data.size;
  }
  return out;
}

}  // namespace downpour
