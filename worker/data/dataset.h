// File: worker/data/dataset.h
//
// A labelled image dataset held in memory, as the readers (idx_reader.h,
// cifar10_reader.h) return it and the Batcher (batcher.h) reads it.
//
// Thread-safety: a plain value; concurrent reads are safe.
#ifndef DOWNPOUR_WORKER_DATA_DATASET_H_
#define DOWNPOUR_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <vector>

namespace downpour {

// Images as float32 in [0, 1], NCHW (C = 1 for IDX, 3 for CIFAR-10), labels
// as class indices.
struct Dataset {
  int64_t size = 0;
  int channels = 1, height = 0, width = 0;
  int num_classes = 10;
  std::vector<float> images;   // size * channels * height * width
  std::vector<int32_t> labels;  // size

  int64_t ExampleSize() const { return int64_t{channels} * height * width; }
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_DATASET_H_
