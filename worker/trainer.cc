#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
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

}  // namespace

absl::StatusOr<TrainResult> RunDownpourWorker(
    const TrainerOptions& options, Model* model, ParameterClient* client,
    Batcher* batcher, const std::function<void(const Progress&)>& on_progress) {
  if (options.n_fetch < 1 || options.n_push < 1) {
    return absl::InvalidArgumentError("n_fetch and n_push must be >= 1");
  }
  if (options.mode == TrainMode::kSync &&
      (options.n_fetch != 1 || options.n_push != 1)) {
    return absl::InvalidArgumentError(
        "sync mode pushes and fetches every step: use n_fetch = n_push = 1");
  }
  Backend* backend = model->backend();
  const int64_t n = model->num_parameters();
  std::vector<float> host_params(n), host_grads(n);
  std::vector<int64_t> versions;
  DP_ASSIGN_OR_RETURN(DeviceBuffer accrued, DeviceBuffer::Create(backend, n));

  TrainResult result;
  PhaseTimes window;
  double window_loss = 0;
  int64_t window_steps = 0, window_examples = 0;
  int64_t seq = 0, accrued_steps = 0;
  bool logged_window = false;
  const absl::Time begin = absl::Now();
  absl::Time window_begin = begin;
  absl::Time t = begin;

  auto push = [&]() -> absl::Status {
    DP_RETURN_IF_ERROR(backend->CopyToHost(accrued.data(), host_grads.data(), n));
    DP_RETURN_IF_ERROR(client->Push(++seq, host_grads, versions));
    DP_RETURN_IF_ERROR(backend->Fill(accrued.data(), n, 0.0f));
    accrued_steps = 0;
    ++result.pushes;
    return absl::OkStatus();
  };

  int epoch = 0;
  while (options.max_steps == 0 || result.steps < options.max_steps) {
    t = absl::Now();
    std::optional<Batch> batch = batcher->Next();
    if (!batch.has_value()) break;
    epoch = batch->epoch;
    window.data += Lap(&t);

    if (result.steps % options.n_fetch == 0) {
      PullOptions wait;
      if (options.mode == TrainMode::kSync && !versions.empty() && seq > 0) {
        // The step after the one this worker's last gradient was for.
        wait.min_version = versions[0] + 1;
      } else if (options.mode == TrainMode::kSsp) {
        wait.worker_clock = result.pushes;
      }
      DP_RETURN_IF_ERROR(
          client->Pull(absl::MakeSpan(host_params), &versions, wait));
      DP_RETURN_IF_ERROR(model->SetParameters(host_params));
      window.pull += Lap(&t);
    }

    DP_ASSIGN_OR_RETURN(StepResult r,
                        model->ComputeGradients(batch->images.data(),
                                                batch->labels.data(),
                                                batch->size));
    if (!std::isfinite(r.loss)) {
      return absl::InternalError(absl::StrFormat(
          "training diverged: loss is %f at step %d; lower the learning rate",
          r.loss, result.steps));
    }
    DP_RETURN_IF_ERROR(backend->Axpy(n, 1.0f, model->gradients(), accrued.data()));
    if (options.n_fetch > 1 && options.local_lr > 0) {
      DP_RETURN_IF_ERROR(backend->Axpy(n, -options.local_lr, model->gradients(),
                                       model->parameters()));
    }
    if (options.debug_step_delay > absl::ZeroDuration()) {
      absl::SleepFor(options.debug_step_delay);
    }
    ++accrued_steps;
    ++result.steps;
    result.examples += batch->size;
    window_loss += r.loss;
    ++window_steps;
    window_examples += batch->size;
    window.compute += Lap(&t);

    if (result.steps % options.n_push == 0) {
      DP_RETURN_IF_ERROR(push());
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
  if (accrued_steps > 0) {
    t = absl::Now();
    DP_RETURN_IF_ERROR(push());
    window.push += Lap(&t);
  }
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
