#include "worker/trainer.h"

#include <algorithm>
#include <functional>
#include <memory>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace downpour {

absl::Status DeclareModel(ParameterClient* client, const Model& model,
                          uint64_t seed, int num_shards,
                          int64_t max_chunk_bytes,
                          const std::vector<float>* initial) {
  ModelLayout layout;
  layout.tensors = model.param_specs();
  layout.num_shards = num_shards;
  layout.max_chunk_bytes = max_chunk_bytes;
  // The deferred layers and the first layer on different shards, whole.
  if (model.leading_deferred_tensors() > 0) {
    layout.pinned_blocks = {model.leading_deferred_tensors(),
                            model.first_layer_tensors()};
  }
  if (initial != nullptr) return client->Declare(layout, *initial);
  return client->Declare(layout, model.InitialParameters(seed));
}

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
  DP_ASSIGN_OR_RETURN(
      std::unique_ptr<DownpourLoop> loop,
      DownpourLoop::Create(options, replicas, client, on_progress));
  return loop->Run();
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
