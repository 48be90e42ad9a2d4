#include "worker/data/idx_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
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
using data_internal::ReadMaybeGzip;

constexpr uint32_t kImagesMagic = 0x00000803;  // u8 data, 3 dims.
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8 data, 1 dim.
constexpr int kNumClasses = 10;

uint32_t BigEndian32(const std::string& s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxFile {
  std::vector<uint32_t> dims;
  size_t payload_offset = 0;  // Where the u8 data starts in `bytes`.
  std::string bytes;
};

// Parses the IDX header of `bytes` and checks that the payload holds exactly
// the number of bytes the dims promise. `what` ("pixels", "labels") is used
// in messages.
absl::StatusOr<IdxFile> ParseIdx(const std::string& path, std::string bytes,
                                 uint32_t want_magic, size_t want_dims,
                                 const char* what) {
  if (bytes.size() < 4) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: file has ", bytes.size(),
        " bytes, too short for an IDX magic number"));
  }
  const uint32_t magic = BigEndian32(bytes, 0);
  if (magic != want_magic) {
    return absl::DataLossError(absl::StrCat(
        path, ": bad IDX magic 0x", absl::Hex(magic, absl::kZeroPad8),
        ", expected 0x", absl::Hex(want_magic, absl::kZeroPad8),
        " (u8 data with ", want_dims, " dims)"));
  }
  const size_t header = 4 + 4 * want_dims;
  if (bytes.size() < header) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: expected a ", header, "-byte header, found ",
        bytes.size(), " bytes"));
  }
  IdxFile out;
  uint64_t expected = 1;
  for (size_t i = 0; i < want_dims; ++i) {
    const uint32_t d = BigEndian32(bytes, 4 + 4 * i);
    out.dims.push_back(d);
    // Dims are u32; three of them can overflow u64 only if the product is
    // absurd, and no real file can hold that many bytes anyway.
    if (d != 0 && expected > (uint64_t{1} << 48) / d) {
      return absl::DataLossError(absl::StrCat(
          path, ": header dims promise an impossibly large payload"));
    }
    expected *= d;
  }
  const uint64_t found = bytes.size() - header;
  if (found < expected) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: expected ",
                                            expected, " bytes of ", what,
                                            ", found ", found));
  }
  if (found > expected) {
    return absl::DataLossError(absl::StrCat(
        path, ": ", found - expected, " unexpected trailing bytes after the ",
        expected, " bytes of ", what));
  }
  out.payload_offset = header;
  out.bytes = std::move(bytes);
  return out;
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_examples) {
  DP_ASSIGN_OR_RETURN(std::string image_bytes, ReadMaybeGzip(images_path));
  DP_ASSIGN_OR_RETURN(IdxFile images,
                      ParseIdx(images_path, std::move(image_bytes),
                               kImagesMagic, 3, "pixels"));
  DP_ASSIGN_OR_RETURN(std::string label_bytes, ReadMaybeGzip(labels_path));
  DP_ASSIGN_OR_RETURN(IdxFile labels,
                      ParseIdx(labels_path, std::move(label_bytes),
                               kLabelsMagic, 1, "labels"));

  const uint32_t count = images.dims[0];
  const uint32_t height = images.dims[1];
  const uint32_t width = images.dims[2];
  if (count > 0 && (height == 0 || width == 0 ||
                    height > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
                    width > static_cast<uint32_t>(std::numeric_limits<int>::max()))) {
    return absl::DataLossError(absl::StrCat(images_path, ": bad image size ",
                                            height, "x", width));
  }
  if (labels.dims[0] != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "count mismatch: ", images_path, " has ", count, " images but ",
        labels_path, " has ", labels.dims[0], " labels"));
  }
  const auto* label_data = reinterpret_cast<const unsigned char*>(
      labels.bytes.data() + labels.payload_offset);
  for (uint32_t i = 0; i < count; ++i) {
    if (label_data[i] >= kNumClasses) {
      return absl::InvalidArgumentError(absl::StrCat(
          labels_path, ": label ", static_cast<int>(label_data[i]),
          " of example ", i, " is out of range [0, ", kNumClasses, ")"));
    }
  }

  Dataset d;
  d.size = count;
  if (max_examples > 0 && max_examples < d.size) d.size = max_examples;
  d.channels = 1;
  d.height = static_cast<int>(height);
  d.width = static_cast<int>(width);
  d.num_classes = kNumClasses;
  const size_t n_pixels = static_cast<size_t>(d.size) * d.ExampleSize();
  d.images.resize(n_pixels);
  const auto* pixel_data = reinterpret_cast<const unsigned char*>(
      images.bytes.data() + images.payload_offset);
  for (size_t i = 0; i < n_pixels; ++i) {
    d.images[i] = static_cast<float>(pixel_data[i]) / 255.0f;
  }
  d.labels.assign(label_data, label_data + d.size);
  return d;
}

absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, bool train,
                                       int64_t max_examples) {
  const std::string prefix = absl::StrCat(dir, "/", train ? "train" : "t10k");
  // Prefer the .gz as distributed; fall back to an already-gunzipped copy.
  auto pick = [](const std::string& base) -> absl::StatusOr<std::string> {
    const std::string gz = base + ".gz";
    if (FileExists(gz)) return gz;
    if (FileExists(base)) return base;
    return absl::NotFoundError(
        absl::StrCat("neither ", gz, " nor ", base, " exists"));
  };
  DP_ASSIGN_OR_RETURN(std::string images, pick(prefix + "-images-idx3-ubyte"));
  DP_ASSIGN_OR_RETURN(std::string labels, pick(prefix + "-labels-idx1-ubyte"));
  return LoadIdxDataset(images, labels, max_examples);
}

}  // namespace downpour
