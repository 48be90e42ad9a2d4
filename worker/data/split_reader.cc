#include "worker/data/split_reader.h"

#include <utility>

#include "worker/data/cifar10_reader.h"
#include "worker/data/idx_reader.h"
#include "worker/data/image_folder_reader.h"
#include "worker/data/tensor_file_reader.h"

namespace downpour {
namespace {

// IDX or CIFAR-10, in memory as floats.
absl::StatusOr<Dataset> LoadDecoded(const SplitRequest& r) {
  if (r.dataset == DatasetKind::kCifar10) {
    return LoadCifar10Split(r.data_dir, r.train, r.max_examples);
  }
  return LoadMnistSplit(r.data_dir, r.train, r.max_examples);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSplit(const SplitRequest& r) {
  const std::string split = r.train ? "train" : "test";
  switch (r.dataset) {
    case DatasetKind::kImageFolder: {
      ImageFolderOptions o;
      o.shape = r.shape;
      o.num_classes = r.num_classes;
      o.resize = r.resize;
      o.max_examples = r.max_examples;
      return OpenImageFolder(r.data_dir + "/" + split, o);
    }
    case DatasetKind::kSafetensors: {
      TensorFileOptions o;
      o.shape = r.shape;
      o.num_classes = r.num_classes;
      o.max_examples = r.max_examples;
      return OpenTensorFile(r.data_dir + "/" + split + ".safetensors", o);
    }
    case DatasetKind::kFashionMnist:
      return OpenMnistSplit(r.data_dir, r.train, r.max_examples);
    case DatasetKind::kCifar10:
      break;
  }
  absl::StatusOr<Dataset> d = LoadDecoded(r);
  if (!d.ok()) return d.status();
  return std::unique_ptr<ExampleSource>(new DatasetSource(*std::move(d)));
}

absl::StatusOr<Dataset> LoadSplit(const SplitRequest& r, int threads,
                                  bool skip_bad, int64_t* skipped) {
  if (r.dataset == DatasetKind::kFashionMnist ||
      r.dataset == DatasetKind::kCifar10) {
    return LoadDecoded(r);
  }
  absl::StatusOr<std::unique_ptr<ExampleSource>> src = OpenSplit(r);
  if (!src.ok()) return src.status();
  return ReadAllExamples(**src, threads, r.num_classes, skip_bad, skipped);
}

}  // namespace downpour
