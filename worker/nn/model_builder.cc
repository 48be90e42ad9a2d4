// File: worker/nn/model_builder.cc
#include "worker/nn/model_builder.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

absl::StatusOr<std::unique_ptr<Layer>> NewLayer(const ResolvedLayer& l) {
  switch (l.kind) {
    case LayerKind::kConv:
      return NewConv2d(l.name, l.out_channels, l.kernel, l.padding, l.stride,
                       l.bias);
    case LayerKind::kBatchNorm:
      return NewBatchNorm(l.name, l.eps, l.momentum);
    case LayerKind::kRelu:
      return NewRelu(l.name);
    case LayerKind::kMaxPool:
      return NewMaxPool(l.name, l.kernel, l.stride, l.padding);
    case LayerKind::kAvgPool:
      return NewAvgPool(l.name, l.kernel, l.stride, l.padding);
    case LayerKind::kDense:
      return NewDense(l.name, l.out_features, l.bias);
    case LayerKind::kDropout:
      return NewDropout(l.name, l.rate);
    case LayerKind::kAdd:
      return NewAdd(l.name);
    case LayerKind::kConcat:
      return NewConcat(l.name);
    case LayerKind::kGlobalAvgPool:
      return NewGlobalAvgPool(l.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("layer \"", l.name, "\": unknown kind"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const ResolvedModel& spec, Backend* backend, int max_batch,
    const BuildModelOptions& options) {
  std::vector<GraphNode> nodes;
  for (const ResolvedLayer& l : spec.layers) {
    DP_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer, NewLayer(l));
    nodes.push_back({std::move(layer), l.inputs});
  }
  if (options.fuse_conv_relu) nodes = FuseConvReluGraph(std::move(nodes));
  ModelOptions mo;
  mo.label_smoothing = options.label_smoothing;
  mo.dropout_seed = options.dropout_seed;
  mo.defer_weight_gradients = options.defer_weight_gradients;
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(backend, std::move(nodes), spec.input, max_batch, mo);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(spec.source, ": ", model.status().message()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const std::string& name_or_path, Backend* backend, int max_batch,
    const BuildModelOptions& options) {
  DP_ASSIGN_OR_RETURN(ResolvedModel spec, LoadModel(name_or_path));
  return BuildModel(spec, backend, max_batch, options);
}

}  // namespace downpour
