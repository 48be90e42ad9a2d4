#include "worker/data/image_folder_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/image_folder.h"

namespace downpour {
namespace {

// Files above this are refused before being read (a PNG or JPEG of
// kMaxImagePixels is far smaller).
constexpr int64_t kMaxFileBytes = int64_t{256} << 20;

// The whole of `path` into *out, reusing its memory. DataLoss naming the
// file when it cannot be read.
absl::Status ReadFileInto(const std::string& path, std::string* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size > kMaxFileBytes) {
    close(fd);
    return absl::DataLossError(absl::StrCat(
        path, ": cannot read, or larger than ", kMaxFileBytes, " bytes"));
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t n = read(fd, &(*out)[got], out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != out->size()) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  return absl::OkStatus();
}

class ImageFolderSource : public ExampleSource {
 public:
  ImageFolderSource(ImageFolderIndex index, std::vector<int64_t> picked,
                    const ImageFolderOptions& options)
      : index_(std::move(index)), picked_(std::move(picked)), options_(options) {}

  int64_t size() const override { return static_cast<int64_t>(picked_.size()); }
  int channels() const override { return options_.shape.channels; }
  int height() const override { return options_.shape.height; }
  int width() const override { return options_.shape.width; }

  absl::Status Read(int64_t i, float* dst, int32_t* label) const override {
    // Per-thread buffers: the Batcher's threads read many files each.
    thread_local std::string bytes;
    thread_local DecodedImage image;
    thread_local std::vector<float> scratch;
    const size_t f = static_cast<size_t>(picked_[static_cast<size_t>(i)]);
    const std::string& path = index_.files[f];
    if (absl::Status s = ReadFileInto(path, &bytes); !s.ok()) return s;
    if (absl::Status s = DecodeImage(bytes, path, &image); !s.ok()) return s;
    if (absl::Status s = ImageToInput(image, options_.shape, options_.resize,
                                      path, &scratch, dst);
        !s.ok()) {
      return s;
    }
    *label = index_.labels[f];
    return absl::OkStatus();
  }

 private:
  const ImageFolderIndex index_;
  const std::vector<int64_t> picked_;  // Indices into index_.files.
  const ImageFolderOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenImageFolder(
    const std::string& split_dir, const ImageFolderOptions& options) {
  absl::StatusOr<ImageFolderIndex> index = ListImageFolder(split_dir);
  if (!index.ok()) return index.status();
  if (static_cast<int64_t>(index->classes.size()) > options.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        split_dir, ": ", index->classes.size(), " class directories (labels 0-",
        index->classes.size() - 1, ") but the model has ", options.num_classes,
        " classes"));
  }
  std::vector<int64_t> picked = SubsetIndices(
      static_cast<int64_t>(index->files.size()), options.max_examples);
  return std::unique_ptr<ExampleSource>(
      new ImageFolderSource(*std::move(index), std::move(picked), options));
}

}  // namespace downpour
