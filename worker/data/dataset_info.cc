#include "worker/data/dataset_info.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/data/file_reading.h"
#include "worker/data/image_folder.h"
#include "worker/data/tensor_file_reader.h"

namespace downpour {
namespace {

constexpr int64_t kCifarRecordBytes = 3073;

absl::StatusOr<int64_t> CountIdxLabels(const std::string& data_dir) {
  std::string path = data_dir + "/train-labels-idx1-ubyte.gz";
  if (!data_internal::FileExists(path)) {
    path = data_dir + "/train-labels-idx1-ubyte";
  }
  absl::StatusOr<std::string> bytes = data_internal::ReadMaybeGzip(path);
  if (!bytes.ok()) return bytes.status();
  const std::string& b = *bytes;
  if (b.size() < 8 || b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != 1) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an IDX label file (bad header)"));
  }
  int64_t n = 0;
  for (int i = 4; i < 8; ++i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  return n;
}

absl::StatusOr<int64_t> CountCifarRecords(const std::string& data_dir) {
  std::string base = data_dir;
  if (!data_internal::FileExists(base + "/data_batch_1.bin")) {
    base = data_dir + "/cifar-10-batches-bin";
  }
  int64_t n = 0;
  for (int i = 1; i <= 5; ++i) {
    const std::string path = absl::StrCat(base, "/data_batch_", i, ".bin");
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (st.st_size % kCifarRecordBytes != 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": size ", st.st_size, " is not a whole number of ",
          kCifarRecordBytes, "-byte records"));
    }
    n += st.st_size / kCifarRecordBytes;
  }
  return n;
}

}  // namespace

DataShard ReplicaShard(int worker, int workers, int replica, int replicas) {
  return DataShard{worker * replicas + replica, workers * replicas};
}

int64_t ExamplesInShard(int64_t examples, DataShard s) {
  if (s.count < 1 || s.index >= examples) return 0;
  return (examples - s.index + s.count - 1) / s.count;
}

std::vector<int64_t> ShardExampleIndices(int64_t examples, DataShard s) {
  std::vector<int64_t> out;
  if (s.count < 1 || s.index < 0) return out;
  out.reserve(static_cast<size_t>(ExamplesInShard(examples, s)));
  for (int64_t i = s.index; i < examples; i += s.count) out.push_back(i);
  return out;
}

absl::StatusOr<int64_t> CountTrainingExamples(DatasetKind dataset,
                                              const std::string& data_dir,
                                              int64_t max_train_examples) {
  absl::StatusOr<int64_t> n;
  switch (dataset) {
    case DatasetKind::kCifar10:
      n = CountCifarRecords(data_dir);
      break;
    case DatasetKind::kImageFolder: {
      absl::StatusOr<ImageFolderIndex> index =
          ListImageFolder(data_dir + "/train");
      if (!index.ok()) return index.status();
      n = static_cast<int64_t>(index->files.size());
      break;
    }
    case DatasetKind::kSafetensors:
      n = CountTensorFileExamples(data_dir + "/train.safetensors");
      break;
    case DatasetKind::kFashionMnist:
      n = CountIdxLabels(data_dir);
      break;
  }
  if (!n.ok()) return n.status();
  return max_train_examples > 0 ? std::min(*n, max_train_examples) : *n;
}

}  // namespace downpour
