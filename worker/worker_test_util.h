// File: worker/worker_test_util.h
//
// Test-only inputs shared by the worker's unit tests (exchange, replica
// group): a small deterministic Fashion-MNIST-shaped dataset.
//
//   Dataset d = TinyDataset(32);  // 32 examples of 28x28, labels i % 10
#ifndef DOWNPOUR_WORKER_WORKER_TEST_UTIL_H_
#define DOWNPOUR_WORKER_WORKER_TEST_UTIL_H_

#include <cstddef>

#include "worker/data/data.h"

namespace downpour {

// `n` 28x28 examples with a deterministic pattern; label i is i % 10.
inline Dataset TinyDataset(int n) {
  Dataset d;
  d.size = n;
  d.height = d.width = 28;
  d.images.resize(static_cast<size_t>(n) * 784);
  d.labels.resize(n);
  for (size_t i = 0; i < d.images.size(); ++i) {
    d.images[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  }
  for (int i = 0; i < n; ++i) d.labels[i] = i % 10;
  return d;
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_WORKER_TEST_UTIL_H_
