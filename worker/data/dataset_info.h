// File: worker/data/dataset_info.h
//
// What a job needs to know about its training set without loading it: how
// many examples it has, and which of them each worker replica reads. The
// batcher cuts its shard with ShardExamples' rule, the worker numbers its
// replicas' shards with ReplicaShard, and the servers size the
// learning-rate schedule with CountTrainingExamples and ExamplesInShard
// (server/lr_rules.h), so the three cannot disagree.
//
//   DP_ASSIGN_OR_RETURN(int64_t n, CountTrainingExamples(
//       DatasetKind::kFashionMnist, "/usr/share/datasets/fashion-mnist", 0));
//   int64_t mine = ExamplesInShard(n, ReplicaShard(w, W, r, R));
//
// Reads at most one small file (CountTrainingExamples); otherwise pure.
#ifndef DOWNPOUR_WORKER_DATA_DATASET_INFO_H_
#define DOWNPOUR_WORKER_DATA_DATASET_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dataset_kind.h"

namespace downpour {

// Shard `index` of `count` of a training set: the examples i with
// i % count == index.
struct DataShard {
  int index = 0;
  int count = 1;
};

// Replica r of R of worker w of W reads shard w * R + r of W * R.
DataShard ReplicaShard(int worker, int workers, int replica, int replicas);

// How many of `examples` examples shard `s` holds: ceil((examples - index) /
// count), 0 when index >= examples.
int64_t ExamplesInShard(int64_t examples, DataShard s);

// The indices of the examples of shard `s`, ascending.
std::vector<int64_t> ShardExampleIndices(int64_t examples, DataShard s);

// The training examples the workers will read from `data_dir`, capped by
// max_train_examples when that is > 0: Fashion-MNIST's count from the
// header of train-labels-idx1-ubyte[.gz], CIFAR-10's from the sizes of
// data_batch_1..5.bin (3073-byte records), an image folder's from the
// file names under DIR/train (no image is decoded), a tensor file's from
// the header of DIR/train.safetensors. NotFound / DataLoss naming the file
// when it cannot be read.
absl::StatusOr<int64_t> CountTrainingExamples(DatasetKind dataset,
                                              const std::string& data_dir,
                                              int64_t max_train_examples);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_DATASET_INFO_H_
