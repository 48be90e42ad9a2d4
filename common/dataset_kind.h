// File: common/dataset_kind.h
//
// The data set formats a job can train on (--dataset), shared by the
// workers, which read the files (worker/data), and the servers, which count
// the training examples for the learning-rate schedule
// (worker/data/dataset_info.h).
#ifndef DOWNPOUR_COMMON_DATASET_KIND_H_
#define DOWNPOUR_COMMON_DATASET_KIND_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/enum_names.h"

namespace downpour {

enum class DatasetKind {
  kFashionMnist,  // IDX files (train-images-idx3-ubyte[.gz], ...).
  kCifar10,       // CIFAR-10 binary batches (data_batch_1.bin, ...).
  kImageFolder,   // PNG/JPEG files, train/<class>/*, test/<class>/*.
  kSafetensors,   // train.safetensors, test.safetensors: images, labels.
};

inline constexpr EnumName<DatasetKind> kDatasetNames[] = {
    {DatasetKind::kFashionMnist, "fashion_mnist"},
    {DatasetKind::kCifar10, "cifar10"},
    {DatasetKind::kImageFolder, "image_folder"},
    {DatasetKind::kSafetensors, "safetensors"},
};

inline const char* DatasetName(DatasetKind d) {
  return EnumNameOf(kDatasetNames, d);
}

bool AbslParseFlag(absl::string_view text, DatasetKind* d, std::string* error);
std::string AbslUnparseFlag(DatasetKind d);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_DATASET_KIND_H_
