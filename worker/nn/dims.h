// File: worker/nn/dims.h
//
// The per-example shape of an activation, shared by the model-spec resolver
// (model_spec.h) and the executor (model.h).
#ifndef DOWNPOUR_WORKER_NN_DIMS_H_
#define DOWNPOUR_WORKER_NN_DIMS_H_

#include <cstdint>

namespace downpour {

// Per-example tensor dimensions (C, H, W); dense activations use {n, 1, 1}.
struct Dims {
  int c = 0, h = 0, w = 0;
  int64_t Size() const { return int64_t{c} * h * w; }
  bool operator==(const Dims& o) const {
    return c == o.c && h == o.h && w == o.w;
  }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_DIMS_H_
