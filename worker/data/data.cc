// File: worker/data/data.cc
//
// IDX reading (raw or gzip through zlib's gz* API) and the sharded, shuffled,
// prefetching Batcher declared in data.h.
//
// Error codes:
//   NotFound         a file does not exist.
//   DataLoss         a file cannot be read or is not a well-formed IDX file
//                    (bad magic, truncated payload, corrupt gzip stream).
//   InvalidArgument  well-formed files that disagree (image/label counts) or
//                    hold labels outside [0, num_classes); bad BatcherOptions.
// Every file error names the file.
#include "worker/data/data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <deque>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8 data, 3 dims.
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8 data, 1 dim.
constexpr int kNumClasses = 10;

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Reads the whole of `path` without decompression.
absl::StatusOr<std::string> ReadRaw(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return out;
}

// Inflates the whole of the gzip file `path`. zlib checks the stream's CRC and
// length, so a corrupt or cut-short stream is reported rather than returning
// partial data.
absl::StatusOr<std::string> ReadGzip(const std::string& path) {
  if (!FileExists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(f, 1 << 17);
  std::string out;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int n = gzread(f, &out[old], kChunk);
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt gzip stream: ", msg));
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A stream that ends early makes gzread return the bytes it had and leave
  // Z_BUF_ERROR ("unexpected end of file") behind.
  int errnum = Z_OK;
  const std::string msg = gzerror(f, &errnum);
  const int close_rc = gzclose(f);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt gzip stream: ", msg));
  }
  if (close_rc != Z_OK) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt gzip stream (close failed, code ",
                     close_rc, ")"));
  }
  return out;
}

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  if (absl::EndsWith(path, ".gz")) return ReadGzip(path);
  return ReadRaw(path);
}

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

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform integer in [0, bound), bound >= 1, from raw mt19937_64 output by
// rejection (Lemire's threshold), so results are the same on every platform
// and standard library.
uint64_t UniformBelow(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound.
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

class BatcherImpl : public Batcher {
 public:
  BatcherImpl(const Dataset* data, const BatcherOptions& options,
              std::vector<int64_t> shard)
      : data_(data), options_(options), shard_(std::move(shard)) {
    producer_ = std::thread([this] { Produce(); });
  }

  ~BatcherImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    space_.SignalAll();
    producer_.join();
  }

  std::optional<Batch> Next() override {
    std::optional<Batch> out;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !done_) ready_.Wait(&mu_);
      if (queue_.empty()) return std::nullopt;
      out = std::move(queue_.front());
      queue_.pop_front();
    }
    space_.Signal();
    return out;
  }

  int64_t BatchesPerEpoch() const override {
    const int64_t n = static_cast<int64_t>(shard_.size());
    return (n + options_.batch_size - 1) / options_.batch_size;
  }

 private:
  // Producer thread body: builds every batch of every epoch in order and
  // hands it over through the bounded queue; returns early when stop_ is set.
  void Produce() {
    const int64_t example = data_->ExampleSize();
    std::vector<int64_t> order = shard_;
    for (int epoch = 0; epoch < options_.epochs; ++epoch) {
      // The order is reshuffled from the shard's natural order each epoch, so
      // epoch e's order depends only on (seed, worker_index, e).
      order = shard_;
      std::mt19937_64 gen(SplitMix64(
          SplitMix64(SplitMix64(options_.seed) ^
                     static_cast<uint64_t>(options_.worker_index)) ^
          static_cast<uint64_t>(epoch)));
      for (size_t i = order.size(); i > 1; --i) {
        std::swap(order[i - 1], order[UniformBelow(gen, i)]);
      }
      for (size_t begin = 0; begin < order.size();
           begin += static_cast<size_t>(options_.batch_size)) {
        const size_t end = std::min(
            order.size(), begin + static_cast<size_t>(options_.batch_size));
        Batch b;
        b.size = static_cast<int>(end - begin);
        b.epoch = epoch;
        b.images.resize(static_cast<size_t>(b.size) * example);
        b.labels.resize(b.size);
        for (size_t k = begin; k < end; ++k) {
          const int64_t idx = order[k];
          std::copy_n(data_->images.begin() + idx * example, example,
                      b.images.begin() + (k - begin) * example);
          b.labels[k - begin] = data_->labels[idx];
        }
        {
          absl::MutexLock lock(&mu_);
          while (!stop_ &&
                 queue_.size() >= static_cast<size_t>(options_.prefetch)) {
            space_.Wait(&mu_);
          }
          if (stop_) return;
          queue_.push_back(std::move(b));
        }
        ready_.Signal();
      }
    }
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    ready_.SignalAll();
  }

  const Dataset* const data_;  // Not owned.
  const BatcherOptions options_;
  const std::vector<int64_t> shard_;  // Example indices of this worker.

  absl::Mutex mu_;
  absl::CondVar ready_;  // queue_ gained a batch or done_ became true.
  absl::CondVar space_;  // queue_ lost a batch or stop_ became true.
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // Producer emitted everything.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;  // Destructor wants the thread out.
  std::thread producer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(
    const Dataset* data, const BatcherOptions& o) {
  if (data == nullptr) return absl::InvalidArgumentError("data is null");
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be >= 1, got ", o.batch_size));
  }
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be >= 1, got ", o.num_workers));
  }
  if (o.worker_index < 0 || o.worker_index >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_index must be in [0, ", o.num_workers, "), got ",
                     o.worker_index));
  }
  if (o.epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epochs must be >= 0, got ", o.epochs));
  }
  if (o.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch must be >= 1, got ", o.prefetch));
  }
  if (data->size < 0 ||
      static_cast<int64_t>(data->labels.size()) != data->size ||
      static_cast<int64_t>(data->images.size()) !=
          data->size * data->ExampleSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent dataset: size ", data->size, ", ", data->labels.size(),
        " labels, ", data->images.size(), " floats of images for examples of ",
        data->ExampleSize()));
  }
  std::vector<int64_t> shard;
  for (int64_t i = o.worker_index; i < data->size; i += o.num_workers) {
    shard.push_back(i);
  }
  if (shard.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", o.worker_index, " of ", o.num_workers,
        " gets no examples from a dataset of ", data->size));
  }
  return std::unique_ptr<Batcher>(new BatcherImpl(data, o, std::move(shard)));
}

}  // namespace downpour
