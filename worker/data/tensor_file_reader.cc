// The safetensors layout: [u64 little-endian header length n][n bytes of
// JSON][data], each tensor's "data_offsets" relative to the data. Only the
// `images` and `labels` entries are looked at; other tensors and
// "__metadata__" are allowed and ignored.
#include "worker/data/tensor_file_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

// As the reference implementation: a larger header is refused unread.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // Byte offsets into the data section.
};

struct Header {
  uint64_t data_start = 0;  // 8 + header length.
  TensorEntry images, labels;
};

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool ReadAt(int fd, void* buf, size_t n, off_t at) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, static_cast<char*>(buf) + got, n - got,
                            at + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

size_t ElementBytes(const std::string& dtype) {
  if (dtype == "U8") return 1;
  if (dtype == "I32" || dtype == "F32") return 4;
  if (dtype == "I64") return 8;
  return 0;
}

absl::Status ParseEntry(const std::string& path, const nlohmann::json& j,
                        const char* name, uint64_t data_bytes,
                        TensorEntry* out) {
  const auto it = j.find(name);
  if (it == j.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no tensor named \"", name, "\""));
  }
  const nlohmann::json& e = *it;
  if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
      !e.contains("shape") || !e["shape"].is_array() ||
      !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
      e["data_offsets"].size() != 2) {
    return absl::DataLossError(
        absl::StrCat(path, ": tensor \"", name, "\" is not a valid entry"));
  }
  out->dtype = e["dtype"].get<std::string>();
  for (const nlohmann::json& d : e["shape"]) {
    if (!d.is_number_unsigned()) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor \"", name, "\" has a bad shape"));
    }
    out->shape.push_back(static_cast<int64_t>(
        std::min<uint64_t>(d.get<uint64_t>(), uint64_t{1} << 62)));
  }
  for (const nlohmann::json& o : e["data_offsets"]) {
    if (!o.is_number_unsigned()) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor \"", name, "\" has bad data_offsets"));
    }
  }
  out->begin = e["data_offsets"][0].get<uint64_t>();
  out->end = e["data_offsets"][1].get<uint64_t>();
  if (out->begin > out->end || out->end > data_bytes) {
    return absl::DataLossError(absl::StrCat(
        path, ": tensor \"", name, "\" data_offsets [", out->begin, ", ",
        out->end, "] lie outside the file's ", data_bytes, " bytes of data"));
  }
  const size_t element = ElementBytes(out->dtype);
  // The bytes the shape needs, saturating: never more than the file.
  uint64_t need = element;
  for (int64_t d : out->shape) {
    if (d != 0 && need > data_bytes / static_cast<uint64_t>(d)) {
      need = std::numeric_limits<uint64_t>::max();
      for (int64_t z : out->shape) {
        if (z == 0) need = 0;
      }
      break;
    }
    need *= static_cast<uint64_t>(d);
  }
  if (element != 0 && need != out->end - out->begin) {
    return absl::DataLossError(absl::StrCat(
        path, ": tensor \"", name, "\" of ", out->dtype, " [",
        absl::StrJoin(out->shape, ", "), "] does not fill its ",
        out->end - out->begin, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> ReadHeader(const std::string& path, int fd,
                                  uint64_t file_bytes) {
  unsigned char len[8];
  if (file_bytes < 8 || !ReadAt(fd, len, 8, 0)) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a safetensors file (shorter than 8 bytes)"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > file_bytes - 8) {
    return absl::DataLossError(absl::StrCat(
        path, ": not a safetensors file (header length ", n, " in a file of ",
        file_bytes, " bytes)"));
  }
  std::string text(static_cast<size_t>(n), '\0');
  if (!ReadAt(fd, text.data(), text.size(), 8)) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::DataLossError(
        absl::StrCat(path, ": the safetensors header is not a JSON object"));
  }
  Header h;
  h.data_start = 8 + n;
  const uint64_t data_bytes = file_bytes - h.data_start;
  if (absl::Status s = ParseEntry(path, j, "images", data_bytes, &h.images);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ParseEntry(path, j, "labels", data_bytes, &h.labels);
      !s.ok()) {
    return s;
  }
  const TensorEntry& im = h.images;
  const TensorEntry& lb = h.labels;
  if (im.dtype != "U8" && im.dtype != "F32") {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": images are ", im.dtype, "; expected U8 (uint8) or F32"));
  }
  if (lb.dtype != "U8" && lb.dtype != "I32" && lb.dtype != "I64") {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": labels are ", lb.dtype,
        "; expected U8 (uint8), I32 or I64"));
  }
  if (im.shape.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": images have shape [", absl::StrJoin(im.shape, ", "),
        "]; expected [N, C, H, W]"));
  }
  if (lb.shape.size() != 1 || lb.shape[0] != im.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": labels have shape [", absl::StrJoin(lb.shape, ", "),
        "]; expected [", im.shape[0], "], one per image"));
  }
  return h;
}

class TensorFileSource : public ExampleSource {
 public:
  // Takes over the mapping `map` of `map_bytes`.
  TensorFileSource(void* map, size_t map_bytes, const Header& h,
                   std::vector<int32_t> labels, const TensorFileOptions& o)
      : labels_(std::move(labels)), map_(map), map_bytes_(map_bytes),
        n_(static_cast<int64_t>(labels_.size())), shape_(o.shape),
        u8_(h.images.dtype == "U8"),
        images_(static_cast<const unsigned char*>(map) + h.data_start +
                h.images.begin) {}
  ~TensorFileSource() override {
    if (map_ != nullptr) munmap(map_, map_bytes_);
  }

  int64_t size() const override { return n_; }
  int channels() const override { return shape_.channels; }
  int height() const override { return shape_.height; }
  int width() const override { return shape_.width; }

  absl::Status Read(int64_t i, float* dst, int32_t* label) const override {
    const size_t n = static_cast<size_t>(shape_.Size());
    if (u8_) {
      PixelsToFloats(images_ + static_cast<size_t>(i) * n, n, dst);
    } else {
      std::memcpy(dst, images_ + static_cast<size_t>(i) * n * sizeof(float),
                  n * sizeof(float));
    }
    *label = labels_[static_cast<size_t>(i)];
    return absl::OkStatus();
  }


 private:
  const std::vector<int32_t> labels_;
  void* const map_;
  const size_t map_bytes_;
  const int64_t n_;
  const ImageShape shape_;
  const bool u8_;
  const unsigned char* const images_;  // Into map_.
};

absl::Status OpenFile(const std::string& path, Fd* fd, uint64_t* bytes) {
  fd->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd->fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  }
  *bytes = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CountTensorFileExamples(const std::string& path) {
  Fd fd;
  uint64_t bytes = 0;
  if (absl::Status s = OpenFile(path, &fd, &bytes); !s.ok()) return s;
  absl::StatusOr<Header> h = ReadHeader(path, fd.fd, bytes);
  if (!h.ok()) return h.status();
  return h->labels.shape[0];
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTensorFile(
    const std::string& path, const TensorFileOptions& options) {
  Fd fd;
  uint64_t bytes = 0;
  if (absl::Status s = OpenFile(path, &fd, &bytes); !s.ok()) return s;
  absl::StatusOr<Header> h = ReadHeader(path, fd.fd, bytes);
  if (!h.ok()) return h.status();
  const std::vector<int64_t>& s = h->images.shape;
  if (s[1] != options.shape.channels || s[2] != options.shape.height ||
      s[3] != options.shape.width) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": images are ", s[1], "x", s[2], "x", s[3],
        " (C x H x W) but the model takes ", options.shape.channels, "x",
        options.shape.height, "x", options.shape.width));
  }
  const int64_t n = options.max_examples > 0
                        ? std::min(s[0], options.max_examples)
                        : s[0];
  void* map = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ,
                   MAP_PRIVATE, fd.fd, 0);
  if (map == MAP_FAILED) {
    return absl::DataLossError(
        absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
  }
  const unsigned char* lp =
      static_cast<const unsigned char*>(map) + h->data_start + h->labels.begin;
  const size_t lsize = ElementBytes(h->labels.dtype);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = 0;
    if (lsize == 1) {
      v = lp[i];
    } else if (lsize == 4) {
      int32_t x;
      std::memcpy(&x, lp + 4 * i, 4);
      v = x;
    } else {
      std::memcpy(&v, lp + 8 * i, 8);
    }
    if (v < 0 || v >= options.num_classes) {
      munmap(map, static_cast<size_t>(bytes));
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": label ", v, " of example ", i, " is outside the model's ",
          options.num_classes, " classes (0-", options.num_classes - 1, ")"));
    }
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  auto src = std::make_unique<TensorFileSource>(
      map, static_cast<size_t>(bytes), *h, std::move(labels), options);
  return std::unique_ptr<ExampleSource>(std::move(src));
}

}  // namespace downpour
