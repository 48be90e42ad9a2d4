// File: worker/data/split_reader.h
//
// One split (train or test) of any data set a job can name (--dataset,
// common/dataset_kind.h) as an ExampleSource for the Batcher: IDX files
// held in memory as their u8 pixels, CIFAR-10 files loaded into memory, an
// image folder decoded as it is read (image_folder_reader.h), a
// safetensors file mapped (tensor_file_reader.h).
//
//   SplitRequest r;
//   r.dataset = DatasetKind::kImageFolder; r.data_dir = dir; r.train = true;
//   r.shape = {1, 28, 28}; r.num_classes = 10;   // the model's input
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> train, OpenSplit(r));
//
// Where the files live:
//   fashion_mnist  DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//   cifar10        DIR/data_batch_{1..5}.bin, DIR/test_batch.bin
//   image_folder   DIR/{train,test}/<class>/<image>.{png,jpg,jpeg}
//   safetensors    DIR/{train,test}.safetensors
#ifndef DOWNPOUR_WORKER_DATA_SPLIT_READER_H_
#define DOWNPOUR_WORKER_DATA_SPLIT_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/dataset_kind.h"
#include "worker/data/dataset.h"
#include "worker/data/example_source.h"
#include "worker/data/input_options.h"

namespace downpour {

struct SplitRequest {
  DatasetKind dataset = DatasetKind::kFashionMnist;
  std::string data_dir;
  bool train = true;
  int64_t max_examples = 0;  // > 0: at most this many.
  // The model's input and classes; image folders are converted and resized
  // to it, tensor files must match it. IDX and CIFAR-10 keep their own.
  ImageShape shape;
  int num_classes = 10;
  ImageResize resize = ImageResize::kBilinear;
};

// The split as a source: the errors of the format's reader, each naming the
// file or directory.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSplit(const SplitRequest& r);

// The whole split in memory (for the evaluation), decoded by `threads`
// threads; with `skip_bad`, corrupt images are left out and counted in
// *skipped.
absl::StatusOr<Dataset> LoadSplit(const SplitRequest& r, int threads,
                                  bool skip_bad, int64_t* skipped);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_SPLIT_READER_H_
