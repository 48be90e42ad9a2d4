// File: worker/model_files.cc
#include "worker/model_files.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The file's tensors by name: each one's spec and offset into `flat`.
struct FileTensor {
  const TensorSpec* spec;
  int64_t offset;
};
std::map<std::string, FileTensor> IndexTensors(const SafetensorsFile& file) {
  std::map<std::string, FileTensor> index;
  int64_t offset = 0;
  for (const TensorSpec& t : file.tensors) {
    index[t.name] = {&t, offset};
    offset += t.NumElements();
  }
  return index;
}

// Copies the tensors named by `specs` from `file` (indexed by `index`) into
// a flat vector in their order; records every name used in `used`.
absl::StatusOr<std::vector<float>> Gather(
    const std::string& path, const SafetensorsFile& file,
    const std::map<std::string, FileTensor>& index,
    const std::vector<TensorSpec>& specs, std::set<std::string>* used) {
  std::vector<float> out;
  for (const TensorSpec& want : specs) {
    const auto it = index.find(want.name);
    if (it == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--init_from=", path, ": no tensor \"", want.name,
                       "\" (the model's ", ShapeString(want.shape), ")"));
    }
    if (it->second.spec->shape != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--init_from=", path, ": tensor \"", want.name, "\" is ",
          ShapeString(it->second.spec->shape), ", the model's is ",
          ShapeString(want.shape)));
    }
    const float* src = file.flat.data() + it->second.offset;
    out.insert(out.end(), src, src + want.NumElements());
    used->insert(want.name);
  }
  return out;
}

bool HasAll(const std::map<std::string, FileTensor>& index,
            const std::vector<TensorSpec>& specs) {
  for (const TensorSpec& want : specs) {
    if (index.count(want.name) == 0) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<InitialValues> ReadInitFrom(const std::string& path,
                                           const Model& model) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("--init_from: ", file.status().message()));
  }
  const std::map<std::string, FileTensor> index = IndexTensors(*file);
  InitialValues v;
  std::set<std::string> used;
  DP_ASSIGN_OR_RETURN(v.parameters,
                      Gather(path, *file, index, model.param_specs(), &used));
  if (!model.state_specs().empty() && HasAll(index, model.state_specs())) {
    DP_ASSIGN_OR_RETURN(v.state,
                        Gather(path, *file, index, model.state_specs(), &used));
  }
  for (const TensorSpec& t : file->tensors) {
    if (used.count(t.name) == 0 &&
        !absl::EndsWith(t.name, ".num_batches_tracked") &&
        !absl::EndsWith(t.name, ".running_mean") &&
        !absl::EndsWith(t.name, ".running_var")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--init_from=", path, ": tensor \"", t.name,
                       "\" is not in the model"));
    }
  }
  return v;
}

absl::Status RecomputeStatistics(Model* model, const Dataset& train,
                                 int64_t max_examples) {
  if (model->state_size() == 0) return absl::OkStatus();
  if (train.ExampleSize() != model->input_dims().Size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch-norm statistics: training examples have ", train.ExampleSize(),
        " values, the model expects ", model->input_dims().Size()));
  }
  int64_t n = train.size;
  if (max_examples > 0) n = std::min(n, max_examples);
  const int batch = model->max_batch();
  // A batch of one example may have no variance to measure: it is left out.
  int64_t k = 0;
  for (int64_t i = 0; i < n && n - i >= 2; i += batch, ++k) {
    const int b = static_cast<int>(std::min<int64_t>(batch, n - i));
    DP_RETURN_IF_ERROR(model->UpdateStatistics(
        train.images.data() + i * train.ExampleSize(), b,
        1.f / static_cast<float>(k + 1)));
  }
  return absl::OkStatus();
}

absl::Status SaveModel(const std::string& path, const Model& model,
                       absl::Span<const float> parameters,
                       const std::map<std::string, std::string>& metadata) {
  // The graph's order (the flat vector's may lead with deferred layers).
  const std::vector<TensorSpec>& in_flat = model.param_specs();
  std::vector<int64_t> offset(in_flat.size() + 1, 0);
  for (size_t t = 0; t < in_flat.size(); ++t) {
    offset[t + 1] = offset[t] + in_flat[t].NumElements();
  }
  if (static_cast<int64_t>(parameters.size()) != offset.back()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saving ", path, ": ", parameters.size(), " values for a model of ",
        offset.back()));
  }
  std::vector<TensorSpec> specs;
  std::vector<float> flat;
  flat.reserve(parameters.size());
  for (const int t : model.graph_order()) {
    specs.push_back(in_flat[t]);
    flat.insert(flat.end(), parameters.begin() + offset[t],
                parameters.begin() + offset[t + 1]);
  }
  if (model.state_size() > 0) {
    std::vector<float> state(model.state_size());
    DP_RETURN_IF_ERROR(model.GetState(absl::MakeSpan(state)));
    specs.insert(specs.end(), model.state_specs().begin(),
                 model.state_specs().end());
    flat.insert(flat.end(), state.begin(), state.end());
  }
  return WriteSafetensors(path, specs, flat, metadata);
}

}  // namespace downpour
