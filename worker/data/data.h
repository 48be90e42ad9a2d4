// File: worker/data/data.h
//
// Training data, all of it: the umbrella header of worker/data. The pieces
// live in their own units:
//   dataset.h         the in-memory Dataset (NCHW floats in [0, 1], labels)
//   idx_reader.h      IDX (MNIST / Fashion-MNIST), gzipped or raw
//   cifar10_reader.h  CIFAR-10 binary files, and the CIFAR-10 channel stats
//   example_source.h  what the batcher reads from: a Dataset, or a reader
//                     that decodes each example as it is read
//   image_folder_reader.h, image_decode.h
//                     PNG/JPEG image folders (libpng, libjpeg-turbo)
//   tensor_file_reader.h
//                     a mapped safetensors file of images and labels
//   split_reader.h    any --dataset's train or test split as a source
//   input_options.h   normalization, resizing, skipping bad images
//   batcher.h         per-worker sharded, reshuffled, multi-threaded batcher
//   augment.h         random crop, flip and normalization of one example
//   buffer_pool.h     Batch and the pool its (possibly pinned) buffers
//                     are recycled through
//
// Usage:
//   DP_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(
//       dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"));
//   BatcherOptions o; o.worker_index = 1; o.num_workers = 2; o.batch_size = 64;
//   DP_ASSIGN_OR_RETURN(auto batcher, Batcher::Create(&train, o));
//   while (std::optional<Batch> b = batcher->Next()) { ... }
//   DP_RETURN_IF_ERROR(batcher->status());
//
//   // CIFAR-10 with the usual augmentation:
//   DP_ASSIGN_OR_RETURN(Dataset cifar, LoadCifar10Split(dir, /*train=*/true));
//   o.augment.random_crop_padding = 4; o.augment.horizontal_flip = true;
//   o.normalize_mean.assign(kCifar10Mean, kCifar10Mean + 3);
//   o.normalize_std.assign(kCifar10Std, kCifar10Std + 3);
#ifndef DOWNPOUR_WORKER_DATA_DATA_H_
#define DOWNPOUR_WORKER_DATA_DATA_H_

#include "worker/data/augment.h"
#include "worker/data/batcher.h"
#include "worker/data/buffer_pool.h"
#include "worker/data/cifar10_reader.h"
#include "worker/data/dataset.h"
#include "worker/data/example_source.h"
#include "worker/data/idx_reader.h"
#include "worker/data/input_options.h"
#include "worker/data/split_reader.h"

#endif  // DOWNPOUR_WORKER_DATA_DATA_H_
