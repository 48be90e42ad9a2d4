// File: worker/data/image_folder.h
//
// The file list of an image folder, torchvision ImageFolder's layout: one
// directory per class under a split directory, class indices from the
// sorted directory names, the image files (.png, .jpg, .jpeg, any case) of
// each class directory and its subdirectories in sorted path order. Only
// names are read, never an image, so counting a split of 60,000 files
// (dataset_info.h's CountTrainingExamples, on the servers) is cheap.
//
//   DP_ASSIGN_OR_RETURN(ImageFolderIndex index, ListImageFolder(dir + "/train"));
//   // index.files[i] is in class index.labels[i], named index.classes[...]
//
// Errors, each naming the directory: NotFound for a missing split
// directory; InvalidArgument for one without class directories or with an
// empty class directory (as ImageFolder refuses it).
//
// Thread-safety: the functions keep no state.
#ifndef DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_H_
#define DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

struct ImageFolderIndex {
  std::vector<std::string> classes;  // Sorted directory names.
  std::vector<std::string> files;    // Full paths, class by class.
  std::vector<int32_t> labels;       // One per file: index into classes.
};

absl::StatusOr<ImageFolderIndex> ListImageFolder(const std::string& split_dir);

// The examples a reader takes from `total` when capped at `max` (> 0 and
// below total): `max` indices spread evenly over the list, floor(k * total /
// max), so that a class-ordered list still gives every class its share.
// All of them when max <= 0 or max >= total.
std::vector<int64_t> SubsetIndices(int64_t total, int64_t max);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_H_
