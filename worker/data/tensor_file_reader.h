// File: worker/data/tensor_file_reader.h
//
// A data set in one safetensors file, as NumPy writes it with
// `safetensors.numpy.save_file({"images": x, "labels": y}, path)`: tensor
// `images` of uint8 (scaled by 1/255) or float32 (taken as they are), shape
// [N, C, H, W]; tensor `labels` of uint8, int32 or int64, shape [N]. The
// file is mapped (mmap), not read: Read(i) converts example i straight from
// the page cache, so a data set larger than memory works too.
//
//   TensorFileOptions o; o.shape = {1, 28, 28}; o.num_classes = 10;
//   DP_ASSIGN_OR_RETURN(auto src, OpenTensorFile(dir + "/train.safetensors", o));
//
// Errors at open, each naming the file: NotFound when it does not exist;
// DataLoss for a malformed file (header length or JSON, offsets outside the
// file or not matching the shape); InvalidArgument for a missing tensor, a
// dtype or shape other than the above, N differing between the two, C, H, W
// differing from the model's, or a label outside the model's classes.
// Read never fails once the file is open.
#ifndef DOWNPOUR_WORKER_DATA_TENSOR_FILE_READER_H_
#define DOWNPOUR_WORKER_DATA_TENSOR_FILE_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/example_source.h"

namespace downpour {

struct TensorFileOptions {
  ImageShape shape;      // The model's input; must match the file's.
  int num_classes = 10;  // The model's classes.
  // > 0: only the first this many examples.
  int64_t max_examples = 0;
};

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTensorFile(
    const std::string& path, const TensorFileOptions& options);

// N of the file's `labels` tensor, from its header alone (for
// dataset_info.h). Errors as OpenTensorFile's, for the header.
absl::StatusOr<int64_t> CountTensorFileExamples(const std::string& path);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_TENSOR_FILE_READER_H_
