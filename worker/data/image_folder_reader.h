// File: worker/data/image_folder_reader.h
//
// An image folder (image_folder.h's layout) as an ExampleSource: Read(i)
// reads and decodes file i (image_decode.h), converts it to the model's
// channels and resizes it to the model's size. Nothing is decoded when the
// folder is opened; the Batcher's threads decode in parallel, every epoch.
//
//   ImageFolderOptions o;
//   o.shape = {1, 28, 28}; o.num_classes = 10;
//   DP_ASSIGN_OR_RETURN(auto src, OpenImageFolder(dir + "/train", o));
//
// Errors at open: those of ListImageFolder, and InvalidArgument when the
// folder has more class directories than the model has classes. Read:
// DataLoss naming the file for an unreadable or corrupt image,
// ResourceExhausted for one above kMaxImagePixels, InvalidArgument for a
// size mismatch under ImageResize::kNone.
#ifndef DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_READER_H_
#define DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/example_source.h"
#include "worker/data/image_decode.h"
#include "worker/data/input_options.h"

namespace downpour {

struct ImageFolderOptions {
  ImageShape shape;     // What Read produces: the model's input.
  int num_classes = 10;  // The model's classes.
  ImageResize resize = ImageResize::kBilinear;
  // > 0: only this many files, spread over the list (SubsetIndices).
  int64_t max_examples = 0;
};

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenImageFolder(
    const std::string& split_dir, const ImageFolderOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_IMAGE_FOLDER_READER_H_
