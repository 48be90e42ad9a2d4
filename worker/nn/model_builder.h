// File: worker/nn/model_builder.h
//
// A Model from a spec (worker/nn/model_spec.h): each layer of the spec
// becomes a graph node (model.h) reading the nodes its `inputs` name, with
// its parameters named and shaped as PyTorch names them.
//
//   DP_ASSIGN_OR_RETURN(auto model, BuildModel("resnet20", backend, 64));
//   DP_ASSIGN_OR_RETURN(auto mine, BuildModel("nets/mine.prototxt", backend, 64));
#ifndef DOWNPOUR_WORKER_NN_MODEL_BUILDER_H_
#define DOWNPOUR_WORKER_NN_MODEL_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_spec.h"

namespace downpour {

struct BuildModelOptions {
  // Each convolution and the ReLU that alone reads it run as one layer
  // (FuseConvReluGraph): the same parameters and, up to float rounding, the
  // same results, one pass over the activations fewer. false keeps them
  // separate (the reference the fused path is tested against).
  bool fuse_conv_relu = true;
  // Label smoothing of the training loss (ModelOptions), in [0, 1).
  float label_smoothing = 0.0f;
  // Seeds the dropout masks (ModelOptions).
  uint64_t dropout_seed = 0;
  // ModelOptions::defer_weight_gradients.
  bool defer_weight_gradients = false;
};

// The built-in models (models/README.md) include:
//
// "fashion_cnn", on 1x28x28 input (Fashion-MNIST), 225,034 parameters:
//   conv 3x3x32 + ReLU + 2x2 max-pool, conv 3x3x64 + ReLU + 2x2 max-pool,
//   dense 128 + ReLU, dense 10 (valid padding: 28 -> 26 -> 13 -> 11 -> 5;
//   64*5*5 = 1600 features) [conv1, conv2, fc1, fc2].
//
// "cifar_vgg", on 3x32x32 input (CIFAR-10), 2,196,810 parameters: a small
//   VGG-11-like net of three blocks, each two 3x3 convs with padding 1 (size
//   kept) + ReLU and a 2x2 max-pool, at 64, 128 and 256 channels
//   (32 -> 16 -> 8 -> 4), then dense 256 + ReLU, dense 10
//   [conv1 .. conv6, fc1, fc2].
absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const ResolvedModel& spec, Backend* backend, int max_batch,
    const BuildModelOptions& options = {});

// LoadModel(name_or_path) (a built-in name or a spec file), then the above.
absl::StatusOr<std::unique_ptr<Model>> BuildModel(
    const std::string& name_or_path, Backend* backend, int max_batch,
    const BuildModelOptions& options = {});

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_MODEL_BUILDER_H_
