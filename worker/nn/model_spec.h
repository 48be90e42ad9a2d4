// File: worker/nn/model_spec.h
//
// Model files: a network as protobuf text format of downpour.ModelSpec
// (proto/model.proto; the format is described in models/README.md). This
// unit parses a spec, checks it and infers every layer's shapes; it knows
// nothing of backends. The built-in models ("fashion_cnn", "cifar_vgg",
// "resnet20", "inception_small") are the files of models/, compiled into
// the binary, so a name works without the files next to it.
//
//   DP_ASSIGN_OR_RETURN(ResolvedModel m, LoadModel(options.model));
//   DP_RETURN_IF_ERROR(CheckModelFitsData(m, 1, 28, 28, 10));
//   for (const ResolvedLayer& l : m.layers) { ... l.inputs, l.out ... }
//
// Every error is an absl::Status a user can act on: a syntax error names the
// file, line and column; a bad spec names the layer and what is wrong. A
// spec that resolves has bounded sizes (kMax* below), so a hostile file
// cannot make a reader of it allocate without bound.
//
// Thread-safety: free functions of their arguments only.
#ifndef DOWNPOUR_WORKER_NN_MODEL_SPEC_H_
#define DOWNPOUR_WORKER_NN_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model.pb.h"
#include "worker/nn/dims.h"

namespace downpour {

// Bounds of a spec that resolves.
constexpr int kMaxLayers = 10000;
constexpr int64_t kMaxParameters = int64_t{1} << 31;  // Trainable floats.
constexpr int64_t kMaxActivation = int64_t{1} << 28;  // Floats per example.
constexpr int kMaxChannels = 1 << 20;  // Channels, features and classes.
constexpr int kMaxSpatial = 1 << 16;   // Input height or width.
constexpr int kMaxNameLength = 256;

enum class LayerKind {
  kConv,
  kBatchNorm,
  kRelu,
  kMaxPool,
  kAvgPool,
  kDense,
  kDropout,
  kAdd,
  kConcat,
  kGlobalAvgPool
};

// The spec's spelling of a kind ("conv", "batch_norm", ...).
const char* LayerKindName(LayerKind kind);

struct ResolvedLayer {
  std::string name;
  LayerKind kind;
  // Indices into ResolvedModel::layers; -1 is the model's input.
  std::vector<int> inputs;
  std::vector<Dims> in_dims;  // Per input.
  // Per-example output dims (dense/global_avg_pool: {n, 1, 1}).
  Dims out;
  // The configuration with every default applied:
  int out_channels = 0;  // conv
  int out_features = 0;  // dense
  // conv, pools (stride already = kernel for pools when unset).
  int kernel = 0, stride = 0, padding = 0;
  bool bias = true;                    // conv, dense
  float eps = 1e-5f, momentum = 0.1f;  // batch_norm
  float rate = 0.f;                    // dropout
  // Trainable floats of this layer (weight + bias); running stats not
  // counted.
  int64_t num_parameters = 0;
};

struct ResolvedModel {
  std::string name;
  std::string source;  // file path, or "built-in <name>"
  Dims input;
  int classes = 0;
  // In file order (a valid topological order).
  std::vector<ResolvedLayer> layers;
  int64_t num_parameters = 0;
};

// Parses text format; a syntax error is InvalidArgument
// "<source>:<line>:<col>: <parser message>". A field the format does not
// know is an error too; directly in a layer it is reported as an unknown
// layer kind naming the layer.
absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view text,
                                         absl::string_view source);

// A built-in name ("fashion_cnn", ...) or a path to a .prototxt/.pbtxt file
// (NotFound naming the path when it cannot be read); parsed and resolved.
absl::StatusOr<ResolvedModel> LoadModel(const std::string& name_or_path);

// Every check of the spec, with shapes inferred; errors are InvalidArgument
// "<source>: layer \"<name>\": <what is wrong>" (or "<source>: input: ..."
// and "<source>: ..." for the model as a whole). Layer names are
// identifiers ([A-Za-z_][A-Za-z0-9_]*, as PyTorch module names), not
// "input", unique; inputs name earlier layers; add and concat take two or
// more inputs, every other kind exactly one; every layer but the last is
// read by a later one; the last gives input.classes values per example.
absl::StatusOr<ResolvedModel> ResolveModel(const ModelSpec& spec,
                                           absl::string_view source);

// The data set's image shape and class count against the model's input: an
// error naming both when they disagree.
absl::Status CheckModelFitsData(const ResolvedModel& m, int channels,
                                int height, int width, int classes);

// The built-in names, sorted.
std::vector<std::string> BuiltinModelNames();

// The text of a built-in spec, or NotFound listing the known names.
absl::StatusOr<std::string> BuiltinModelText(absl::string_view name);

// One tensor of a model's state, as PyTorch's state_dict names it.
struct ModelTensor {
  std::string name;  // "<layer>.weight", ".bias", ".running_mean", ...
  std::vector<int64_t> shape;  // conv [O, I, k, k], dense [out, in], else [C].
  bool trainable = true;       // false: batch norm running statistics.
};

// Every tensor of the model in state_dict order: per layer weight, bias,
// then for batch norm running_mean and running_var (PyTorch's
// num_batches_tracked is not kept). The trainable ones, in this order, sum
// to m.num_parameters.
std::vector<ModelTensor> ModelTensors(const ResolvedModel& m);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_MODEL_SPEC_H_
