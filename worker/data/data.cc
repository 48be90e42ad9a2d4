// File: worker/data/data.cc
//
// IDX reading (raw or gzip through zlib's gz* API), CIFAR-10 binary reading,
// and the sharded, shuffled, multi-threaded, buffer-recycling Batcher
// declared in data.h.
//
// Error codes:
//   NotFound         a file does not exist.
//   DataLoss         a file cannot be read or is not a well-formed IDX file
//                    (bad magic, truncated payload, corrupt gzip stream).
//                    A CIFAR-10 file whose size is not a positive multiple
//                    of the 3073-byte record.
//   InvalidArgument  well-formed files that disagree (image/label counts) or
//                    hold labels outside [0, num_classes); bad BatcherOptions.
//   ResourceExhausted  the batcher's buffers cannot be allocated.
// Every file error names the file.
#include "worker/data/data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

namespace data_internal {

// Free lists of batch buffers, keyed by element count (a batcher needs two
// sizes: full batches and the epoch's last partial batch). Shared by the
// batcher and every Batch it made, so whichever goes last frees the memory.
// Thread-safe.
class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  explicit BatchBufferPool(HostAllocator* alloc) : alloc_(alloc) {}

  // Gives `batch` buffers of `images` floats and `labels` ints, recycled ones
  // when there are, else fresh ones (std::bad_alloc when allocation fails).
  void Fill(size_t images, size_t labels, Batch* batch) {
    batch->images = Take(&free_images_, images);
    batch->labels = Take(&free_labels_, labels);
    batch->pool_ = shared_from_this();
  }

  // Allocates `count` buffer pairs up front, so that running out of (pinned)
  // memory shows at Create() rather than mid-training.
  void Reserve(int count, size_t images, size_t labels) {
    for (int i = 0; i < count; ++i) {
      HostArray<float> im(alloc_, images);
      HostArray<int32_t> lb(alloc_, labels);
      Return(std::move(im), std::move(lb));
    }
  }

  void Return(HostArray<float> images, HostArray<int32_t> labels) {
    absl::MutexLock lock(&mu_);
    if (!images.empty())
      free_images_[images.size()].push_back(std::move(images));
    if (!labels.empty())
      free_labels_[labels.size()].push_back(std::move(labels));
  }

 private:
  template <typename T>
  using FreeLists = std::map<size_t, std::vector<HostArray<T>>>;

  template <typename T>
  HostArray<T> Take(FreeLists<T>* lists, size_t n) {
    if (n == 0) return HostArray<T>();
    {
      absl::MutexLock lock(&mu_);
      auto it = lists->find(n);
      if (it != lists->end() && !it->second.empty()) {
        HostArray<T> a = std::move(it->second.back());
        it->second.pop_back();
        return a;
      }
    }
    // Outside the lock: a pinned allocation can take milliseconds.
    return HostArray<T>(alloc_, n);
  }

  HostAllocator* const alloc_;  // Not owned.
  absl::Mutex mu_;
  FreeLists<float> free_images_ ABSL_GUARDED_BY(mu_);
  FreeLists<int32_t> free_labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace data_internal

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    ReturnBuffers();
    size = o.size;
    epoch = o.epoch;
    images = std::move(o.images);
    labels = std::move(o.labels);
    pool_ = std::move(o.pool_);
  }
  return *this;
}

Batch::~Batch() { ReturnBuffers(); }

void Batch::ReturnBuffers() {
  if (pool_ == nullptr) return;  // Hand-built, or moved from.
  pool_->Return(std::move(images), std::move(labels));
  pool_.reset();
}

namespace {

using data_internal::BatchBufferPool;

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

// Separates the augmentation draws from the shuffle's seed derivation.
constexpr uint64_t kAugmentSalt = 0x6175676d656e7421ULL;  // "augment!"

// Largest accepted AugmentOptions::random_crop_padding.
constexpr int kMaxCropPadding = 1 << 16;

class BatcherImpl : public Batcher {
 public:
  BatcherImpl(const Dataset* data, const BatcherOptions& options,
              std::vector<int64_t> shard, std::shared_ptr<BatchBufferPool> pool)
      : data_(data),
        options_(options),
        shard_(std::move(shard)),
        pool_(std::move(pool)),
        batches_per_epoch_(
            (static_cast<int64_t>(shard_.size()) + options_.batch_size - 1) /
            options_.batch_size),
        total_batches_(batches_per_epoch_ * options_.epochs),
        plain_copy_(options_.augment.random_crop_padding == 0 &&
                    !options_.augment.horizontal_flip &&
                    options_.normalize_mean.empty()),
        slots_(static_cast<size_t>(options_.prefetch)) {
    for (int i = 0; i < options_.num_threads; ++i) {
      threads_.emplace_back([this] { Work(); });
    }
  }

  ~BatcherImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    may_claim_.SignalAll();
    for (std::thread& t : threads_) t.join();
    // slots_ hand their buffers back to the pool as they are destroyed.
  }

  std::optional<Batch> Next() override {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (next_emit_ >= total_batches_ || next_emit_ >= failed_at_) {
        return std::nullopt;
      }
      std::optional<Batch>& slot = Slot(next_emit_);
      if (slot.has_value()) {
        std::optional<Batch> out = std::move(slot);
        slot.reset();
        ++next_emit_;
        may_claim_.Signal();
        return out;
      }
      ready_.Wait(&mu_);
    }
  }

  int64_t BatchesPerEpoch() const override { return batches_per_epoch_; }

  absl::Status status() const override {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  // Producer thread body: claims batch sequence numbers in order, at most
  // `prefetch` ahead of the consumer, builds them outside the lock and parks
  // them in their slot.
  void Work() {
    for (;;) {
      int64_t seq;
      std::shared_ptr<const std::vector<int64_t>> order;
      {
        absl::MutexLock lock(&mu_);
        while (!stop_ && next_claim_ < total_batches_ &&
               next_claim_ < failed_at_ &&
               next_claim_ >= next_emit_ + options_.prefetch) {
          may_claim_.Wait(&mu_);
        }
        if (stop_ || next_claim_ >= total_batches_ ||
            next_claim_ >= failed_at_) {
          return;
        }
        seq = next_claim_++;
        const int epoch = static_cast<int>(seq / batches_per_epoch_);
        if (epoch != order_epoch_) {
          // Claims are in order, so epochs only move forward; batches of the
          // previous epoch still being built keep its order alive.
          order_ = ShuffledShard(epoch);
          order_epoch_ = epoch;
        }
        order = order_;
      }
      Batch b;
      bool built = true;
      try {
        Build(seq, *order, &b);
      } catch (const std::bad_alloc&) {
        built = false;
      }
      {
        absl::MutexLock lock(&mu_);
        if (built) {
          Slot(seq) = std::move(b);
        } else {
          if (seq < failed_at_) failed_at_ = seq;
          if (status_.ok()) {
            status_ = absl::ResourceExhaustedError(absl::StrCat(
                "batcher: cannot allocate a batch buffer from the ",
                options_.allocator->Name(), " host allocator"));
          }
          may_claim_.SignalAll();
        }
      }
      ready_.Signal();
    }
  }

  // The shard in epoch `epoch`'s order: a Fisher-Yates shuffle of the natural
  // order by a generator seeded from (seed, worker_index, epoch) only.
  std::shared_ptr<const std::vector<int64_t>> ShuffledShard(int epoch) const {
    auto order = std::make_shared<std::vector<int64_t>>(shard_);
    std::mt19937_64 gen(
        SplitMix64(SplitMix64(SplitMix64(options_.seed) ^
                              static_cast<uint64_t>(options_.worker_index)) ^
                   static_cast<uint64_t>(epoch)));
    for (size_t i = order->size(); i > 1; --i) {
      std::swap((*order)[i - 1], (*order)[UniformBelow(gen, i)]);
    }
    return order;
  }

  // Fills `b` with batch `seq` (epoch seq / BatchesPerEpoch()).
  void Build(int64_t seq, const std::vector<int64_t>& order, Batch* b) const {
    const int epoch = static_cast<int>(seq / batches_per_epoch_);
    const size_t begin = static_cast<size_t>(seq % batches_per_epoch_) *
                         static_cast<size_t>(options_.batch_size);
    const size_t end = std::min(
        order.size(), begin + static_cast<size_t>(options_.batch_size));
    const int n = static_cast<int>(end - begin);
    const size_t example = static_cast<size_t>(data_->ExampleSize());
    pool_->Fill(static_cast<size_t>(n) * example, static_cast<size_t>(n), b);
    b->size = n;
    b->epoch = epoch;
    for (size_t k = begin; k < end; ++k) {
      const int64_t idx = order[k];
      const float* src = data_->images.data() + idx * example;
      float* dst = b->images.data() + (k - begin) * example;
      if (plain_copy_) {
        std::memcpy(dst, src, example * sizeof(float));
      } else {
        Transform(src, dst, ExampleKey(epoch, k));
      }
      b->labels[k - begin] = data_->labels[idx];
    }
  }

  // The seed of the augmentation draws for the example at `position` of
  // epoch `epoch`'s order.
  uint64_t ExampleKey(int epoch, size_t position) const {
    return SplitMix64(
        SplitMix64(SplitMix64(SplitMix64(options_.seed ^ kAugmentSalt) ^
                              static_cast<uint64_t>(options_.worker_index)) ^
                   static_cast<uint64_t>(epoch)) ^
        static_cast<uint64_t>(position));
  }

  // Crop with zero padding, flip, normalize: dst(c, y, x) is
  // padded(c, y + dy, x' + dx) with x' = W-1-x when flipped (else x) and
  // (dy, dx) the crop offset in the padded image, then normalized.
  void Transform(const float* src, float* dst, uint64_t key) const {
    const int channels = data_->channels, h = data_->height, w = data_->width;
    const int pad = options_.augment.random_crop_padding;
    int shift_y = 0, shift_x = 0;  // Crop offset minus the padding.
    if (pad > 0) {
      const uint64_t span = 2 * static_cast<uint64_t>(pad) + 1;
      // Modulo bias is below span / 2^64: irrelevant, and platform-independent.
      shift_y = static_cast<int>(SplitMix64(key ^ 1) % span) - pad;
      shift_x = static_cast<int>(SplitMix64(key ^ 2) % span) - pad;
    }
    const bool flip =
        options_.augment.horizontal_flip && (SplitMix64(key ^ 3) >> 63) != 0;
    const bool normalize = !options_.normalize_mean.empty();
    for (int c = 0; c < channels; ++c) {
      const float* plane = src + static_cast<size_t>(c) * h * w;
      float* out = dst + static_cast<size_t>(c) * h * w;
      const float mean = normalize ? options_.normalize_mean[c] : 0.f;
      const float stddev = normalize ? options_.normalize_std[c] : 1.f;
      for (int y = 0; y < h; ++y) {
        const int sy = y + shift_y;
        float* row = out + static_cast<size_t>(y) * w;
        const float* src_row =
            (sy >= 0 && sy < h) ? plane + static_cast<size_t>(sy) * w : nullptr;
        for (int x = 0; x < w; ++x) {
          const int sx = (flip ? w - 1 - x : x) + shift_x;
          const float v =
              (src_row != nullptr && sx >= 0 && sx < w) ? src_row[sx] : 0.f;
          row[x] = normalize ? (v - mean) / stddev : v;
        }
      }
    }
  }

  std::optional<Batch>& Slot(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slots_[static_cast<size_t>(seq % options_.prefetch)];
  }

  const Dataset* const data_;  // Not owned.
  const BatcherOptions options_;
  const std::vector<int64_t> shard_;  // Example indices of this worker.
  const std::shared_ptr<BatchBufferPool> pool_;
  const int64_t batches_per_epoch_;
  const int64_t total_batches_;
  const bool plain_copy_;  // No augmentation or normalization: memcpy.

  mutable absl::Mutex mu_;
  absl::CondVar ready_;      // A slot was filled, or a build failed.
  absl::CondVar may_claim_;  // next_emit_ advanced, stop_ set, or a failure.
  // Batch seq lives in slots_[seq % prefetch] from its build until Next();
  // only seqs in [next_emit_, next_emit_ + prefetch) are ever claimed.
  std::vector<std::optional<Batch>> slots_ ABSL_GUARDED_BY(mu_);
  int64_t next_claim_ ABSL_GUARDED_BY(mu_) = 0;  // Next seq to build.
  int64_t next_emit_ ABSL_GUARDED_BY(mu_) = 0;   // Next seq Next() returns.
  // First seq whose build failed; Next() stops there.
  int64_t failed_at_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int order_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  std::shared_ptr<const std::vector<int64_t>> order_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;  // Destructor wants threads out.
  std::vector<std::thread> threads_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(
    const Dataset* data, const BatcherOptions& options) {
  if (data == nullptr) return absl::InvalidArgumentError("data is null");
  BatcherOptions o = options;
  if (o.allocator == nullptr) o.allocator = DefaultHostAllocator();
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
  if (o.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 1, got ", o.num_threads));
  }
  if (o.augment.random_crop_padding < 0 ||
      o.augment.random_crop_padding > kMaxCropPadding) {
    return absl::InvalidArgumentError(absl::StrCat(
        "augment.random_crop_padding must be in [0, ", kMaxCropPadding,
        "], got ", o.augment.random_crop_padding));
  }
  if (data->size < 0 || data->channels < 1 || data->height < 1 ||
      data->width < 1 ||
      static_cast<int64_t>(data->labels.size()) != data->size ||
      static_cast<int64_t>(data->images.size()) !=
          data->size * data->ExampleSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent dataset: size ", data->size, ", ", data->labels.size(),
        " labels, ", data->images.size(), " floats of images for examples of ",
        data->channels, "x", data->height, "x", data->width));
  }
  if (o.normalize_mean.size() != o.normalize_std.size() ||
      (!o.normalize_mean.empty() &&
       static_cast<int64_t>(o.normalize_mean.size()) != data->channels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "normalize_mean and normalize_std must both be empty or both have one "
        "value per channel (",
        data->channels, "); got ", o.normalize_mean.size(), " and ",
        o.normalize_std.size()));
  }
  for (size_t c = 0; c < o.normalize_std.size(); ++c) {
    if (!(o.normalize_std[c] > 0) || !std::isfinite(o.normalize_std[c]) ||
        !std::isfinite(o.normalize_mean[c])) {
      return absl::InvalidArgumentError(
          absl::StrCat("normalize: channel ", c,
                       " needs a finite mean and a finite std > 0, "
                       "got mean ",
                       o.normalize_mean[c], " std ", o.normalize_std[c]));
    }
  }
  std::vector<int64_t> shard;
  for (int64_t i = o.worker_index; i < data->size; i += o.num_workers) {
    shard.push_back(i);
  }
  if (shard.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", o.worker_index, " of ", o.num_workers,
                     " gets no examples from a dataset of ", data->size));
  }

  // Enough buffers for the batches in flight (prefetch) plus the one the
  // consumer holds; more are allocated only if the consumer keeps several.
  auto pool = std::make_shared<BatchBufferPool>(o.allocator);
  const int64_t first_batch =
      std::min<int64_t>(o.batch_size, static_cast<int64_t>(shard.size()));
  const int64_t total =
      (static_cast<int64_t>(shard.size()) + o.batch_size - 1) / o.batch_size *
      o.epochs;
  const int reserve =
      static_cast<int>(std::min<int64_t>(int64_t{o.prefetch} + 1, total));
  try {
    pool->Reserve(reserve,
                  static_cast<size_t>(first_batch * data->ExampleSize()),
                  static_cast<size_t>(first_batch));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batcher: cannot allocate ", reserve, " buffers of ", first_batch,
        " examples (", first_batch * data->ExampleSize() * sizeof(float),
        " bytes each) from the ", o.allocator->Name(), " host allocator"));
  }
  return std::unique_ptr<Batcher>(
      new BatcherImpl(data, o, std::move(shard), std::move(pool)));
}

}  // namespace downpour
