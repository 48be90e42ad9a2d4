// File: worker/model_files.h
//
// A model's parameters and state to and from files, and the batch-norm
// statistics that go with them:
//  * ReadInitFrom: --init_from, a safetensors file of the same model (a saved
//    --save_params), checked tensor by tensor against the model;
//  * RecomputeStatistics: batch norm's running statistics for the current
//    parameters, as the plain mean over training batches (the workers'
//    running averages follow parameters that kept moving, and are not the
//    servers'; docs/design.md);
//  * SaveModel: parameters and state in one safetensors file that loads into
//    the equivalent torch.nn modules (tools/spec_to_torch.py).
#ifndef DOWNPOUR_WORKER_MODEL_FILES_H_
#define DOWNPOUR_WORKER_MODEL_FILES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"

namespace downpour {

struct InitialValues {
  std::vector<float> parameters;  // model.num_parameters() floats.
  // model.state_size() floats, or empty when the file has no running
  // statistics.
  std::vector<float> state;
};

// The parameters (and running statistics, when the file has all of them) of
// `model` from the safetensors file at `path`. Every parameter must be
// there with the model's shape; a tensor the model does not have is an
// error too, except PyTorch's "<layer>.num_batches_tracked". Errors name the
// file and the first tensor that does not match.
absl::StatusOr<InitialValues> ReadInitFrom(const std::string& path,
                                           const Model& model);

// Sets the running statistics of `model` (which must hold the parameters to
// compute them for) to their mean over the first `max_examples` examples of
// `train` (all when 0 or more than there are) in batches of
// model.max_batch(), in training mode. A no-op for a model without state.
absl::Status RecomputeStatistics(Model* model, const Dataset& train,
                                 int64_t max_examples);

// Writes `parameters` and the model's current state to `path`.
absl::Status SaveModel(const std::string& path, const Model& model,
                       absl::Span<const float> parameters,
                       const std::map<std::string, std::string>& metadata);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_MODEL_FILES_H_
