#include "worker/data/idx_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/example_source.h"
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

// Both files read and checked: the u8 pixels of `count` examples (the first
// max_examples when > 0) of height x width, and their labels.
struct IdxExamples {
  IdxFile images, labels;
  int64_t count = 0;
  int height = 0, width = 0;
  const unsigned char* pixels() const {
    return reinterpret_cast<const unsigned char*>(images.bytes.data() +
                                                  images.payload_offset);
  }
  const unsigned char* label_bytes() const {
    return reinterpret_cast<const unsigned char*>(labels.bytes.data() +
                                                  labels.payload_offset);
  }
};

absl::StatusOr<IdxExamples> ReadIdx(const std::string& images_path,
                                    const std::string& labels_path,
                                    int64_t max_examples) {
  IdxExamples x;
  DP_ASSIGN_OR_RETURN(std::string image_bytes, ReadMaybeGzip(images_path));
  DP_ASSIGN_OR_RETURN(x.images, ParseIdx(images_path, std::move(image_bytes),
                                         kImagesMagic, 3, "pixels"));
  DP_ASSIGN_OR_RETURN(std::string label_bytes, ReadMaybeGzip(labels_path));
  DP_ASSIGN_OR_RETURN(x.labels, ParseIdx(labels_path, std::move(label_bytes),
                                         kLabelsMagic, 1, "labels"));

  const uint32_t count = x.images.dims[0];
  const uint32_t height = x.images.dims[1];
  const uint32_t width = x.images.dims[2];
  if (count > 0 && (height == 0 || width == 0 ||
                    height > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
                    width > static_cast<uint32_t>(std::numeric_limits<int>::max()))) {
    return absl::DataLossError(absl::StrCat(images_path, ": bad image size ",
                                            height, "x", width));
  }
  if (x.labels.dims[0] != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "count mismatch: ", images_path, " has ", count, " images but ",
        labels_path, " has ", x.labels.dims[0], " labels"));
  }
  const unsigned char* label_data = x.label_bytes();
  for (uint32_t i = 0; i < count; ++i) {
    if (label_data[i] >= kNumClasses) {
      return absl::InvalidArgumentError(absl::StrCat(
          labels_path, ": label ", static_cast<int>(label_data[i]),
          " of example ", i, " is out of range [0, ", kNumClasses, ")"));
    }
  }
  x.count = count;
  if (max_examples > 0 && max_examples < x.count) x.count = max_examples;
  x.height = static_cast<int>(height);
  x.width = static_cast<int>(width);
  return x;
}

// The files' pixels kept as u8 (a quarter of the floats' memory, and no
// conversion of the whole split before the first step); each Read converts
// one example.
class IdxSource final : public ExampleSource {
 public:
  explicit IdxSource(IdxExamples x)
      : x_(std::move(x)), pixels_(x_.pixels()), labels_(x_.label_bytes()) {}
  int64_t size() const override { return x_.count; }
  int channels() const override { return 1; }
  int height() const override { return x_.height; }
  int width() const override { return x_.width; }
  absl::Status Read(int64_t index, float* dst, int32_t* label) const override {
    const size_t n = static_cast<size_t>(x_.height) * x_.width;
    PixelsToFloats(pixels_ + static_cast<size_t>(index) * n, n, dst);
    *label = labels_[index];
    return absl::OkStatus();
  }

 private:
  const IdxExamples x_;
  const unsigned char* const pixels_;  // Into x_.
  const unsigned char* const labels_;  // Into x_.
};

// `prefix`-images-idx3-ubyte and its labels, the .gz as distributed
// preferred to an already-gunzipped copy.
absl::StatusOr<IdxExamples> ReadMnistSplit(const std::string& dir, bool train,
                                           int64_t max_examples) {
  const std::string prefix = absl::StrCat(dir, "/", train ? "train" : "t10k");
  auto pick = [](const std::string& base) -> absl::StatusOr<std::string> {
    const std::string gz = base + ".gz";
    if (FileExists(gz)) return gz;
    if (FileExists(base)) return base;
    return absl::NotFoundError(
        absl::StrCat("neither ", gz, " nor ", base, " exists"));
  };
  DP_ASSIGN_OR_RETURN(std::string images, pick(prefix + "-images-idx3-ubyte"));
  DP_ASSIGN_OR_RETURN(std::string labels, pick(prefix + "-labels-idx1-ubyte"));
  return ReadIdx(images, labels, max_examples);
}

Dataset ToDataset(const IdxExamples& x) {
  Dataset d;
  d.size = x.count;
  d.channels = 1;
  d.height = x.height;
  d.width = x.width;
  d.num_classes = kNumClasses;
  const size_t n_pixels = static_cast<size_t>(d.size) * d.ExampleSize();
  const unsigned char* pixels = x.pixels();
  d.images.resize(n_pixels);
  PixelsToFloats(pixels, n_pixels, d.images.data());
  d.labels.assign(x.label_bytes(), x.label_bytes() + d.size);
  return d;
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_examples) {
  DP_ASSIGN_OR_RETURN(IdxExamples x,
                      ReadIdx(images_path, labels_path, max_examples));
  return ToDataset(x);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenIdx(
    const std::string& images_path, const std::string& labels_path,
    int64_t max_examples) {
  DP_ASSIGN_OR_RETURN(IdxExamples x,
                      ReadIdx(images_path, labels_path, max_examples));
  return std::unique_ptr<ExampleSource>(new IdxSource(std::move(x)));
}

absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, bool train,
                                       int64_t max_examples) {
  DP_ASSIGN_OR_RETURN(IdxExamples x, ReadMnistSplit(dir, train, max_examples));
  return ToDataset(x);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenMnistSplit(
    const std::string& dir, bool train, int64_t max_examples) {
  DP_ASSIGN_OR_RETURN(IdxExamples x, ReadMnistSplit(dir, train, max_examples));
  return std::unique_ptr<ExampleSource>(new IdxSource(std::move(x)));
}

}  // namespace downpour
