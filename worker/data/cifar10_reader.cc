#include "worker/data/cifar10_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/file_reading.h"

namespace downpour {
namespace {

using data_internal::FileExists;
using data_internal::ReadRaw;

constexpr int kNumClasses = 10;

// CIFAR-10 binary records: a label byte, then 3 planes of 32x32 u8 pixels.
constexpr int kCifarChannels = 3;
constexpr int kCifarSide = 32;
constexpr int64_t kCifarPixels =
    int64_t{kCifarChannels} * kCifarSide * kCifarSide;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;

}  // namespace

absl::StatusOr<Dataset> LoadCifar10Files(const std::vector<std::string>& paths,
                                         int64_t max_examples) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("LoadCifar10Files: no files given");
  }
  // Sizes first, so a missing or malformed file is reported before anything
  // is read, and the image vector is allocated once.
  std::vector<int64_t> records;  // Per file, for the files that will be read.
  int64_t total = 0;
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      if (err == ENOENT) {
        return absl::NotFoundError(absl::StrCat(path, ": no such file"));
      }
      return absl::DataLossError(
          absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
    }
    const int64_t bytes = st.st_size;
    const int64_t trailing = bytes % kCifarRecord;
    if (bytes == 0 || trailing != 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": size ", bytes, " bytes is not a positive multiple of the ",
          kCifarRecord, "-byte CIFAR-10 record (1 label byte + ", kCifarPixels,
          " pixel bytes)",
          bytes == 0
              ? std::string()
              : absl::StrCat(": ", trailing, " trailing bytes at offset ",
                             bytes - trailing)));
    }
    records.push_back(bytes / kCifarRecord);
    total += records.back();
    if (max_examples > 0 && total >= max_examples) break;
  }
  if (max_examples > 0 && total > max_examples) total = max_examples;

  Dataset d;
  d.size = total;
  d.channels = kCifarChannels;
  d.height = kCifarSide;
  d.width = kCifarSide;
  d.num_classes = kNumClasses;
  d.images.resize(static_cast<size_t>(total * kCifarPixels));
  d.labels.resize(static_cast<size_t>(total));
  int64_t at = 0;
  for (size_t f = 0; f < records.size() && at < total; ++f) {
    const std::string& path = paths[f];
    DP_ASSIGN_OR_RETURN(std::string bytes, ReadRaw(path));
    if (static_cast<int64_t>(bytes.size()) != records[f] * kCifarRecord) {
      return absl::DataLossError(absl::StrCat(
          path, ": size changed while reading (", records[f] * kCifarRecord,
          " bytes, then ", bytes.size(), ")"));
    }
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    const int64_t take = std::min(records[f], total - at);
    for (int64_t r = 0; r < take; ++r, ++at) {
      const unsigned char* rec = data + r * kCifarRecord;
      if (rec[0] >= kNumClasses) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": label ", static_cast<int>(rec[0]),
                         " of record ", r, " (byte offset ", r * kCifarRecord,
                         ") is out of range [0, ", kNumClasses, ")"));
      }
      d.labels[at] = rec[0];
      float* dst = d.images.data() + at * kCifarPixels;
      for (int64_t i = 0; i < kCifarPixels; ++i) {
        dst[i] = static_cast<float>(rec[1 + i]) / 255.0f;
      }
    }
  }
  return d;
}

absl::StatusOr<Dataset> LoadCifar10Split(const std::string& dir, bool train,
                                         int64_t max_examples) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) {
      names.push_back(absl::StrCat("data_batch_", i, ".bin"));
    }
  } else {
    names.push_back("test_batch.bin");
  }
  std::string base = dir;
  if (!FileExists(absl::StrCat(dir, "/", names[0]))) {
    const std::string nested = absl::StrCat(dir, "/cifar-10-batches-bin");
    if (!FileExists(absl::StrCat(nested, "/", names[0]))) {
      return absl::NotFoundError(absl::StrCat("neither ", dir, "/", names[0],
                                              " nor ", nested, "/", names[0],
                                              " exists"));
    }
    base = nested;
  }
  std::vector<std::string> paths;
  for (const std::string& n : names)
    paths.push_back(absl::StrCat(base, "/", n));
  return LoadCifar10Files(paths, max_examples);
}

}  // namespace downpour
