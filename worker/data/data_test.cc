// File: worker/data/data_test.cc
//
// Tests for the IDX and CIFAR-10 readers and the Batcher. Small IDX and
// CIFAR-10 files are written to TEST_TMPDIR (IDX raw and gzipped); the real
// Fashion-MNIST files are used when installed under
// /usr/share/datasets/fashion-mnist/.
#include "worker/data/data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

void PutBE32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

std::string ImagesIdx(uint32_t n, uint32_t h, uint32_t w,
                      const std::vector<uint8_t>& pixels) {
  std::string s;
  PutBE32(&s, 0x00000803);
  PutBE32(&s, n);
  PutBE32(&s, h);
  PutBE32(&s, w);
  s.append(pixels.begin(), pixels.end());
  return s;
}

std::string LabelsIdx(const std::vector<uint8_t>& labels) {
  std::string s;
  PutBE32(&s, 0x00000801);
  PutBE32(&s, static_cast<uint32_t>(labels.size()));
  s.append(labels.begin(), labels.end());
  return s;
}

// Writes `bytes` to TEST_TMPDIR/name, gzipped when the name ends in ".gz".
std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TestTmpDir() + "/" + name;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    WriteBytes(path, bytes);
  }
  return path;
}

std::vector<uint8_t> Pixels(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return p;
}

// A dataset whose example i has every pixel and its label derived from i, so
// a batch's contents identify the examples in it.
Dataset MakeDataset(int64_t n) {
  Dataset d;
  d.size = n;
  d.height = 2;
  d.width = 1;
  for (int64_t i = 0; i < n; ++i) {
    d.images.push_back(static_cast<float>(i));
    d.images.push_back(static_cast<float>(i) + 0.5f);
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

// Example indices in the order the batcher emits them, per epoch.
std::vector<std::vector<int64_t>> Drain(const Dataset& d,
                                        const BatcherOptions& o) {
  auto b = Batcher::Create(&d, o);
  EXPECT_TRUE(b.ok()) << b.status();
  std::vector<std::vector<int64_t>> per_epoch(o.epochs);
  while (std::optional<Batch> batch = (*b)->Next()) {
    EXPECT_EQ(batch->images.size(), static_cast<size_t>(batch->size) * 2);
    EXPECT_EQ(batch->labels.size(), static_cast<size_t>(batch->size));
    for (int k = 0; k < batch->size; ++k) {
      const int64_t idx = static_cast<int64_t>(batch->images[2 * k]);
      EXPECT_EQ(batch->images[2 * k + 1], static_cast<float>(idx) + 0.5f);
      EXPECT_EQ(batch->labels[k], idx % 10);
      per_epoch[batch->epoch].push_back(idx);
    }
  }
  return per_epoch;
}

class IdxTest : public ::testing::TestWithParam<bool> {
 protected:
  std::string Name(const std::string& base) const {
    return GetParam() ? base + ".gz" : base;
  }
};

TEST_P(IdxTest, ReadsValuesExactly) {
  const std::vector<uint8_t> px = Pixels(3 * 4 * 5);
  const std::string ip = WriteFile(Name("ok-images"), ImagesIdx(3, 4, 5, px));
  const std::string lp = WriteFile(Name("ok-labels"), LabelsIdx({7, 0, 9}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 3);
  EXPECT_EQ(d->channels, 1);
  EXPECT_EQ(d->height, 4);
  EXPECT_EQ(d->width, 5);
  EXPECT_EQ(d->num_classes, 10);
  ASSERT_EQ(d->images.size(), px.size());
  for (size_t i = 0; i < px.size(); ++i) {
    EXPECT_EQ(d->images[i], static_cast<float>(px[i]) / 255.0f) << i;
  }
  EXPECT_EQ(d->labels, (std::vector<int32_t>{7, 0, 9}));

  absl::StatusOr<Dataset> two = LoadIdxDataset(ip, lp, /*max_examples=*/2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size, 2);
  EXPECT_EQ(two->images,
            std::vector<float>(d->images.begin(), d->images.begin() + 40));
  EXPECT_EQ(two->labels, (std::vector<int32_t>{7, 0}));
}

TEST_P(IdxTest, MissingFileIsNotFound) {
  const std::string lp = WriteFile(Name("m-labels"), LabelsIdx({1}));
  const std::string ip = TestTmpDir() + "/" + Name("no-such-images");
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
}

TEST_P(IdxTest, BadMagic) {
  std::string bytes = ImagesIdx(1, 1, 1, {5});
  bytes[3] = 0x01;  // A labels magic where images are expected.
  const std::string ip = WriteFile(Name("magic-images"), bytes);
  const std::string lp = WriteFile(Name("magic-labels"), LabelsIdx({1}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
  EXPECT_THAT(d.status().message(), HasSubstr("magic"));
}

TEST_P(IdxTest, TruncatedPixels) {
  std::string bytes = ImagesIdx(2, 3, 3, Pixels(18));
  bytes.resize(bytes.size() - 5);
  const std::string ip = WriteFile(Name("trunc-images"), bytes);
  const std::string lp = WriteFile(Name("trunc-labels"), LabelsIdx({1, 2}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
  EXPECT_THAT(d.status().message(),
              HasSubstr("truncated: expected 18 bytes of pixels, found 13"));
}

TEST_P(IdxTest, TruncatedHeader) {
  const std::string ip =
      WriteFile(Name("hdr-images"), ImagesIdx(2, 3, 3, {}).substr(0, 9));
  const std::string lp = WriteFile(Name("hdr-labels"), LabelsIdx({1, 2}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
  EXPECT_THAT(d.status().message(), HasSubstr("truncated"));
}

TEST_P(IdxTest, CountMismatch) {
  const std::string ip =
      WriteFile(Name("cm-images"), ImagesIdx(3, 1, 2, Pixels(6)));
  const std::string lp = WriteFile(Name("cm-labels"), LabelsIdx({1, 2}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
  EXPECT_THAT(d.status().message(), HasSubstr(lp));
  EXPECT_THAT(d.status().message(), HasSubstr("3 images"));
  EXPECT_THAT(d.status().message(), HasSubstr("2 labels"));
}

TEST_P(IdxTest, LabelOutOfRange) {
  const std::string ip =
      WriteFile(Name("lr-images"), ImagesIdx(3, 1, 1, Pixels(3)));
  const std::string lp = WriteFile(Name("lr-labels"), LabelsIdx({1, 10, 2}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr(lp));
  EXPECT_THAT(d.status().message(), HasSubstr("label 10 of example 1"));
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Gzip" : "Raw";
                         });

TEST(IdxGzipTest, CorruptStream) {
  const std::string ip =
      WriteFile("corrupt-images.gz", ImagesIdx(50, 8, 8, Pixels(50 * 64)));
  const std::string lp =
      WriteFile("corrupt-labels.gz", LabelsIdx(std::vector<uint8_t>(50, 3)));
  std::string gz = ReadBytes(ip);
  ASSERT_GT(gz.size(), 40u);
  // Keep the 10-byte gzip header, garble the deflate data.
  for (size_t i = 12; i < gz.size() - 8; i += 3) gz[i] = static_cast<char>(~gz[i]);
  std::FILE* f = std::fopen(ip.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(gz.data(), 1, gz.size(), f);
  std::fclose(f);
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
}

TEST(IdxGzipTest, CutShortStream) {
  const std::string ip =
      WriteFile("short-images.gz", ImagesIdx(50, 8, 8, Pixels(50 * 64)));
  const std::string lp =
      WriteFile("short-labels.gz", LabelsIdx(std::vector<uint8_t>(50, 3)));
  std::string gz = ReadBytes(ip);
  gz.resize(gz.size() / 2);
  std::FILE* f = std::fopen(ip.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(gz.data(), 1, gz.size(), f);
  std::fclose(f);
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr(ip));
}

TEST(LoadMnistSplitTest, FallsBackToUncompressedFiles) {
  const std::string dir = TestTmpDir() + "/split";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  WriteFile("split/t10k-images-idx3-ubyte", ImagesIdx(2, 1, 1, {0, 255}));
  WriteFile("split/t10k-labels-idx1-ubyte.gz", LabelsIdx({4, 5}));
  absl::StatusOr<Dataset> d = LoadMnistSplit(dir, /*train=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->images, (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(d->labels, (std::vector<int32_t>{4, 5}));

  absl::StatusOr<Dataset> train = LoadMnistSplit(dir, /*train=*/true);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(train.status().message(),
              HasSubstr(dir + "/train-images-idx3-ubyte"));
}

TEST(BatcherTest, RejectsBadOptions) {
  Dataset d = MakeDataset(5);
  auto bad = [&](BatcherOptions o, const std::string& what) {
    absl::StatusOr<std::unique_ptr<Batcher>> b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(b.status().message(), HasSubstr(what));
  };
  BatcherOptions o;
  o.batch_size = 0;
  bad(o, "batch_size");
  o = BatcherOptions();
  o.num_workers = 0;
  bad(o, "num_workers");
  o = BatcherOptions();
  o.worker_index = 2;
  o.num_workers = 2;
  bad(o, "worker_index");
  o.worker_index = -1;
  bad(o, "worker_index");
  o = BatcherOptions();
  o.epochs = -1;
  bad(o, "epochs");
  o = BatcherOptions();
  o.prefetch = 0;
  bad(o, "prefetch");
  o = BatcherOptions();
  o.num_workers = 6;
  o.worker_index = 5;
  bad(o, "no examples");
}

TEST(BatcherTest, ShardsAreDisjointAndCoverEverything) {
  const Dataset d = MakeDataset(103);
  constexpr int kWorkers = 4;
  std::multiset<int64_t> seen;
  for (int w = 0; w < kWorkers; ++w) {
    BatcherOptions o;
    o.worker_index = w;
    o.num_workers = kWorkers;
    o.batch_size = 7;
    o.epochs = 2;
    const auto epochs = Drain(d, o);
    ASSERT_EQ(epochs.size(), 2u);
    // Both epochs are permutations of the same shard: i = w mod W.
    std::multiset<int64_t> e0(epochs[0].begin(), epochs[0].end());
    std::multiset<int64_t> e1(epochs[1].begin(), epochs[1].end());
    EXPECT_EQ(e0, e1);
    EXPECT_EQ(e0.size(), w < 3 ? 26u : 25u);
    for (int64_t i : e0) EXPECT_EQ(i % kWorkers, w);
    seen.insert(e0.begin(), e0.end());
  }
  ASSERT_EQ(seen.size(), 103u);
  int64_t expect = 0;
  for (int64_t i : seen) EXPECT_EQ(i, expect++);  // Each index exactly once.
}

TEST(BatcherTest, ReshufflesEachEpochDeterministically) {
  const Dataset d = MakeDataset(200);
  BatcherOptions o;
  o.batch_size = 16;
  o.epochs = 3;
  o.seed = 42;
  const auto a = Drain(d, o);
  const auto b = Drain(d, o);
  EXPECT_EQ(a, b);  // Same seed: same orders.
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  std::vector<int64_t> natural(200);
  for (int i = 0; i < 200; ++i) natural[i] = i;
  EXPECT_NE(a[0], natural);

  o.seed = 43;
  EXPECT_NE(Drain(d, o)[0], a[0]);
  // Another worker of the same job gets a different permutation pattern.
  o.seed = 42;
  o.num_workers = 2;
  const auto w0 = Drain(d, o);
  o.worker_index = 1;
  const auto w1 = Drain(d, o);
  std::vector<int64_t> w1_shifted;
  for (int64_t i : w1[0]) w1_shifted.push_back(i - 1);
  EXPECT_NE(w0[0], w1_shifted);
}

TEST(BatcherTest, LastPartialBatch) {
  const Dataset d = MakeDataset(23);
  BatcherOptions o;
  o.batch_size = 10;
  o.epochs = 2;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->BatchesPerEpoch(), 3);
  std::vector<std::pair<int, int>> got;  // (epoch, size)
  while (std::optional<Batch> batch = (*b)->Next()) {
    got.emplace_back(batch->epoch, batch->size);
  }
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{
                     {0, 10}, {0, 10}, {0, 3}, {1, 10}, {1, 10}, {1, 3}}));
  EXPECT_FALSE((*b)->Next().has_value());  // Stays exhausted.
}

TEST(BatcherTest, ZeroEpochsYieldsNothing) {
  const Dataset d = MakeDataset(5);
  BatcherOptions o;
  o.epochs = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE((*b)->Next().has_value());
}

TEST(BatcherTest, EarlyDestructionDoesNotHang) {
  const Dataset d = MakeDataset(1000);
  BatcherOptions o;
  o.batch_size = 3;
  o.epochs = 50;
  o.prefetch = 2;
  for (int consumed = 0; consumed < 4; ++consumed) {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int i = 0; i < consumed; ++i) ASSERT_TRUE((*b)->Next().has_value());
    // Destroyed here with the producer blocked on a full queue.
  }
}

// --- Batcher: threads, augmentation, normalization, buffer recycling. ---

// Counts what goes through it; optionally fails after `limit` allocations.
class CountingAllocator : public HostAllocator {
 public:
  explicit CountingAllocator(int64_t limit = -1) : limit_(limit) {}
  void* Allocate(size_t bytes) override {
    if (limit_ >= 0 && allocations_.load() >= limit_) return nullptr;
    ++allocations_;
    return DefaultHostAllocator()->Allocate(bytes);
  }
  void Free(void* p) override {
    ++frees_;
    DefaultHostAllocator()->Free(p);
  }
  const char* Name() const override { return "counting"; }
  int64_t allocations() const { return allocations_.load(); }
  int64_t frees() const { return frees_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> frees_{0};
};

// `n` examples of C x H x W; every pixel of example i is distinct and
// non-zero (it encodes i, c, y, x), the label is i % 10.
Dataset MakeImageDataset(int64_t n, int c, int h, int w) {
  Dataset d;
  d.size = n;
  d.channels = c;
  d.height = h;
  d.width = w;
  for (int64_t i = 0; i < n; ++i) {
    for (int ch = 0; ch < c; ++ch) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          d.images.push_back(static_cast<float>(1 + x + 16 * y + 256 * ch) +
                             static_cast<float>(i) / 1024.0f);
        }
      }
    }
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

struct BatchCopy {
  int size, epoch;
  std::vector<float> images;
  std::vector<int32_t> labels;
  bool operator==(const BatchCopy& o) const {
    return size == o.size && epoch == o.epoch && labels == o.labels &&
           images.size() == o.images.size() &&
           std::memcmp(images.data(), o.images.data(),
                       images.size() * sizeof(float)) == 0;
  }
};

std::vector<BatchCopy> DrainCopies(const Dataset& d, const BatcherOptions& o) {
  auto b = Batcher::Create(&d, o);
  EXPECT_TRUE(b.ok()) << b.status();
  std::vector<BatchCopy> out;
  if (!b.ok()) return out;
  while (std::optional<Batch> batch = (*b)->Next()) {
    EXPECT_EQ(batch->images.size(),
              static_cast<size_t>(batch->size * d.ExampleSize()));
    EXPECT_EQ(batch->labels.size(), static_cast<size_t>(batch->size));
    out.push_back(BatchCopy{
        batch->size, batch->epoch,
        std::vector<float>(batch->images.begin(), batch->images.end()),
        std::vector<int32_t>(batch->labels.begin(), batch->labels.end())});
  }
  EXPECT_TRUE((*b)->status().ok()) << (*b)->status();
  return out;
}

// The reference transform: crop offset (dy, dx) relative to the unpadded
// image, then an optional mirror, then optional normalization.
std::vector<float> Reference(const Dataset& d, int64_t example, int dy, int dx,
                             bool flip, const std::vector<float>& mean,
                             const std::vector<float>& stddev) {
  const int c = d.channels, h = d.height, w = d.width;
  const float* in = d.images.data() + example * d.ExampleSize();
  std::vector<float> out(d.ExampleSize());
  for (int ch = 0; ch < c; ++ch) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
        float v = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                      ? in[(ch * h + sy) * w + sx]
                      : 0.0f;
        if (!mean.empty()) v = (v - mean[ch]) / stddev[ch];
        out[(ch * h + y) * w + x] = v;
      }
    }
  }
  return out;
}

// Which example a batch slot holds: labels are i % 10 and the fractional
// part of any non-padding pixel is i / 1024, but the simplest robust key is
// the label plus a search over the candidates with that label.
struct Match {
  int64_t example = -1;
  int dy = 0, dx = 0;
  bool flip = false;
  int count = 0;  // How many (example, dy, dx, flip) candidates match.
};

Match FindTransform(const Dataset& d, const float* got, int32_t label, int pad,
                    bool try_flip, const std::vector<float>& mean,
                    const std::vector<float>& stddev) {
  Match m;
  for (int64_t i = label; i < d.size; i += 10) {
    for (int dy = -pad; dy <= pad; ++dy) {
      for (int dx = -pad; dx <= pad; ++dx) {
        for (int f = 0; f <= (try_flip ? 1 : 0); ++f) {
          const std::vector<float> want =
              Reference(d, i, dy, dx, f == 1, mean, stddev);
          bool same = true;
          for (size_t k = 0; k < want.size() && same; ++k) {
            same = want[k] == got[k];
          }
          if (same) {
            if (m.count == 0) {
              m.example = i;
              m.dy = dy;
              m.dx = dx;
              m.flip = f == 1;
            }
            ++m.count;
          }
        }
      }
    }
  }
  return m;
}

TEST(BatcherTest, ContentDoesNotDependOnThreadsOrPrefetch) {
  const Dataset d = MakeImageDataset(57, 3, 5, 6);
  BatcherOptions o;
  o.batch_size = 8;
  o.epochs = 3;
  o.seed = 7;
  o.augment.random_crop_padding = 2;
  o.augment.horizontal_flip = true;
  o.normalize_mean = {0.5f, 0.25f, 0.125f};
  o.normalize_std = {0.2f, 0.3f, 0.4f};
  o.num_threads = 1;
  o.prefetch = 1;
  const std::vector<BatchCopy> one = DrainCopies(d, o);
  ASSERT_EQ(one.size(), 3u * 8);
  for (auto [threads, prefetch] :
       {std::pair{3, 5}, std::pair{2, 2}, std::pair{4, 16}}) {
    o.num_threads = threads;
    o.prefetch = prefetch;
    const std::vector<BatchCopy> many = DrainCopies(d, o);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_TRUE(many[i] == one[i])
          << "batch " << i << " differs with " << threads << " threads";
    }
  }
  // Augmentation is on: the same example differs between epochs.
  o.augment = AugmentOptions();
  const std::vector<BatchCopy> plain = DrainCopies(d, o);
  ASSERT_EQ(plain.size(), one.size());
  int differ = 0;
  for (size_t i = 0; i < one.size(); ++i) differ += !(plain[i] == one[i]);
  EXPECT_GT(differ, 20);
  // Another seed gives other augmentations (and orders).
  o.augment.random_crop_padding = 2;
  o.seed = 8;
  EXPECT_FALSE(DrainCopies(d, o)[0] == one[0]);
}

TEST(BatcherTest, RandomCropIsAShiftedCopyWithZeroPadding) {
  const Dataset d = MakeImageDataset(40, 2, 5, 6);
  BatcherOptions o;
  o.batch_size = 7;
  o.epochs = 10;
  o.augment.random_crop_padding = 2;
  std::set<std::pair<int, int>> offsets;
  std::map<int64_t, int> seen;
  int examples = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const Match m =
          FindTransform(d, batch->images.data() + k * d.ExampleSize(),
                        batch->labels[k], 2, /*try_flip=*/false, {}, {});
      ASSERT_EQ(m.count, 1) << "batch example " << k;
      offsets.insert({m.dy, m.dx});
      ++seen[m.example];
      ++examples;
    }
  }
  EXPECT_EQ(examples, 400);
  EXPECT_EQ(seen.size(), 40u);  // Every example, every epoch.
  for (const auto& [i, n] : seen) EXPECT_EQ(n, 10) << i;
  EXPECT_EQ(offsets.size(), 25u);  // All of [-2, 2]^2 occur.
}

TEST(BatcherTest, FlipMirrorsAboutHalfTheTime) {
  const Dataset d = MakeImageDataset(50, 1, 3, 4);
  BatcherOptions o;
  o.batch_size = 16;
  o.epochs = 8;
  o.augment.horizontal_flip = true;
  int flipped = 0, total = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const Match m =
          FindTransform(d, batch->images.data() + k * d.ExampleSize(),
                        batch->labels[k], 0, /*try_flip=*/true, {}, {});
      ASSERT_EQ(m.count, 1);
      flipped += m.flip;
      ++total;
    }
  }
  EXPECT_EQ(total, 400);
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
}

TEST(BatcherTest, CropFlipAndNormalizeTogether) {
  const Dataset d = MakeImageDataset(30, 3, 4, 4);
  BatcherOptions o;
  o.batch_size = 9;
  o.epochs = 4;
  o.num_threads = 3;
  o.augment.random_crop_padding = 1;
  o.augment.horizontal_flip = true;
  o.normalize_mean = {10.f, 300.f, 500.f};
  o.normalize_std = {2.f, 0.5f, 4.f};
  int padded_pixels = 0, examples = 0;
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const float* got = batch->images.data() + k * d.ExampleSize();
      const Match m = FindTransform(d, got, batch->labels[k], 1, true,
                                    o.normalize_mean, o.normalize_std);
      ASSERT_EQ(m.count, 1);
      ++examples;
      // Padding is zero before normalization: -mean / std after.
      for (int64_t p = 0; p < d.ExampleSize(); ++p) {
        const int ch = static_cast<int>(p / 16);
        padded_pixels +=
            got[p] == (0.f - o.normalize_mean[ch]) / o.normalize_std[ch];
      }
    }
  }
  EXPECT_EQ(examples, 120);
  EXPECT_GT(padded_pixels, 0);
}

TEST(BatcherTest, NormalizationOnly) {
  const Dataset d = MakeImageDataset(12, 2, 3, 3);
  BatcherOptions o;
  o.batch_size = 5;
  o.normalize_mean = {0.5f, -2.0f};
  o.normalize_std = {0.25f, 3.0f};
  auto b = Batcher::Create(&d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  int checked = 0;
  while (std::optional<Batch> batch = (*b)->Next()) {
    for (int k = 0; k < batch->size; ++k) {
      const float* got = batch->images.data() + k * d.ExampleSize();
      // Identify the example by its first pixel, which is 1 + i / 1024.
      const int64_t i = std::lround((got[0] * 0.25f + 0.5f - 1.0f) * 1024.0f);
      ASSERT_GE(i, 0);
      ASSERT_LT(i, 12);
      ASSERT_EQ(batch->labels[k], i % 10);
      const float* in = d.images.data() + i * d.ExampleSize();
      for (int64_t p = 0; p < d.ExampleSize(); ++p) {
        const int ch = static_cast<int>(p / 9);
        EXPECT_FLOAT_EQ(got[p],
                        (in[p] - o.normalize_mean[ch]) / o.normalize_std[ch]);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12 * 18);
}

TEST(BatcherTest, RejectsBadAugmentAndThreadOptions) {
  Dataset d = MakeImageDataset(5, 3, 2, 2);
  auto bad = [&](const BatcherOptions& o, const std::string& what) {
    absl::StatusOr<std::unique_ptr<Batcher>> b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(b.status().message(), HasSubstr(what));
  };
  BatcherOptions o;
  o.num_threads = 0;
  bad(o, "num_threads");
  o = BatcherOptions();
  o.augment.random_crop_padding = -1;
  bad(o, "random_crop_padding");
  o = BatcherOptions();
  o.normalize_mean = {0.f, 0.f, 0.f};
  bad(o, "normalize_mean");
  o.normalize_std = {1.f, 1.f};
  bad(o, "normalize_mean");
  o.normalize_std = {1.f, 0.f, 1.f};
  bad(o, "channel 1");
  o = BatcherOptions();
  o.allocator = nullptr;  // Means the default allocator.
  EXPECT_TRUE(Batcher::Create(&d, o).ok());
}

TEST(BatcherTest, BuffersAreRecycled) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(103, 3, 4, 4);
  BatcherOptions o;
  o.batch_size = 10;  // 10 full batches and one of 3 per epoch.
  o.epochs = 40;
  o.prefetch = 3;
  o.num_threads = 2;
  o.allocator = &alloc;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    // Create reserves prefetch + 1 image and label buffers.
    EXPECT_EQ(alloc.allocations(), 2 * (o.prefetch + 1));
    int batches = 0;
    while (std::optional<Batch> batch = (*b)->Next()) {
      EXPECT_EQ(batch->images.allocator(), &alloc);
      EXPECT_EQ(batch->labels.allocator(), &alloc);
      ++batches;
    }
    EXPECT_EQ(batches, 40 * 11);
    // Full batches never need more than the reserve; the partial batches
    // share one more pair (they are 11 batches apart, prefetch is 3).
    EXPECT_EQ(alloc.allocations(), 2 * (o.prefetch + 1) + 2);
  }
  EXPECT_EQ(alloc.frees(), alloc.allocations());
}

TEST(BatcherTest, ConsumerHoldingManyBatchesStillRecycles) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(100, 1, 2, 2);
  BatcherOptions o;
  o.batch_size = 10;
  o.epochs = 20;
  o.prefetch = 2;
  o.allocator = &alloc;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int round = 0; round < 20; ++round) {
      std::vector<Batch> held;
      for (int i = 0; i < 10; ++i) {
        std::optional<Batch> batch = (*b)->Next();
        ASSERT_TRUE(batch.has_value());
        held.push_back(std::move(*batch));
      }
    }
    EXPECT_FALSE((*b)->Next().has_value());
    // 10 held + 2 in flight (+1 slack for timing), independent of rounds.
    EXPECT_LE(alloc.allocations(), 2 * (10 + o.prefetch + 1));
  }
  EXPECT_EQ(alloc.frees(), alloc.allocations());
}

TEST(BatcherTest, BatchOutlivesBatcher) {
  CountingAllocator alloc;
  const Dataset d = MakeImageDataset(30, 1, 2, 3);
  BatcherOptions o;
  o.batch_size = 4;
  o.epochs = 5;
  o.num_threads = 3;
  o.allocator = &alloc;
  std::vector<Batch> kept;
  {
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int i = 0; i < 3; ++i) {
      std::optional<Batch> batch = (*b)->Next();
      ASSERT_TRUE(batch.has_value());
      kept.push_back(std::move(*batch));
    }
    // The batcher goes with batches still in flight and in its queue.
  }
  for (const Batch& batch : kept) {
    ASSERT_EQ(batch.size, 4);
    for (int k = 0; k < batch.size; ++k) {
      const int64_t i = std::lround((batch.images[k * 6] - 1.0f) * 1024.0f);
      EXPECT_EQ(batch.labels[k], i % 10);
      // The last pixel, (y, x) = (1, 2), is 1 + 2 + 16 plus i / 1024.
      EXPECT_EQ(batch.images[k * 6 + 5],
                19.0f + static_cast<float>(i) / 1024.0f);
    }
  }
  // Move-assigning over a pooled batch hands its buffers back, too.
  kept[0] = std::move(kept[1]);
  EXPECT_EQ(kept[1].images.size(), 0u);
  kept.clear();
  EXPECT_EQ(alloc.frees(), alloc.allocations());
  EXPECT_GT(alloc.allocations(), 0);
}

TEST(BatcherTest, AllocationFailures) {
  const Dataset d = MakeImageDataset(40, 1, 2, 2);
  BatcherOptions o;
  o.batch_size = 4;
  o.epochs = 2;
  o.prefetch = 2;
  {
    CountingAllocator none(0);
    o.allocator = &none;
    auto b = Batcher::Create(&d, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(b.status().message(), HasSubstr("counting"));
  }
  {
    // Exactly the reserve: a consumer that keeps every batch runs out.
    CountingAllocator reserve_only(2 * (o.prefetch + 1));
    o.allocator = &reserve_only;
    auto b = Batcher::Create(&d, o);
    ASSERT_TRUE(b.ok()) << b.status();
    std::vector<Batch> held;
    while (std::optional<Batch> batch = (*b)->Next()) {
      held.push_back(std::move(*batch));
    }
    EXPECT_EQ(held.size(), static_cast<size_t>(o.prefetch + 1));
    EXPECT_EQ((*b)->status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_FALSE((*b)->Next().has_value());
  }
}

TEST(BatcherTest, HandBuiltBatchIsAPlainValue) {
  Batch b;
  b.size = 2;
  b.images = HostArray<float>(DefaultHostAllocator(), 8, /*zero=*/true);
  b.labels = HostArray<int32_t>(DefaultHostAllocator(), 2, /*zero=*/true);
  Batch moved = std::move(b);
  EXPECT_EQ(moved.images.size(), 8u);
  EXPECT_EQ(moved.labels[1], 0);
}

// --- CIFAR-10 binary files. ---

// A record whose label is `label` and whose pixel j is (seed + 7 j) mod 256.
std::string CifarRecord(uint8_t label, int seed) {
  std::string r(1, static_cast<char>(label));
  for (int j = 0; j < 3072; ++j) {
    r.push_back(static_cast<char>((seed + 7 * j) % 256));
  }
  return r;
}

TEST(Cifar10Test, ReadsRecordsAcrossFiles) {
  const std::string a = WriteFile(
      "cifar-a.bin", CifarRecord(3, 0) + CifarRecord(9, 1) + CifarRecord(0, 2));
  const std::string b =
      WriteFile("cifar-b.bin", CifarRecord(5, 3) + CifarRecord(1, 4));
  absl::StatusOr<Dataset> d = LoadCifar10Files({a, b});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 5);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 32);
  EXPECT_EQ(d->width, 32);
  EXPECT_EQ(d->num_classes, 10);
  EXPECT_EQ(d->labels, (std::vector<int32_t>{3, 9, 0, 5, 1}));
  ASSERT_EQ(d->images.size(), 5u * 3072);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3072; ++j) {
      ASSERT_EQ(d->images[i * 3072 + j],
                static_cast<float>((i + 7 * j) % 256) / 255.0f)
          << "example " << i << " pixel " << j;
    }
  }
  // Channel-major: pixel (c, y, x) of example 0 is byte 1 + 1024 c + 32 y + x.
  EXPECT_EQ(d->images[1024 * 2 + 32 * 5 + 7],
            static_cast<float>((7 * (2048 + 160 + 7)) % 256) / 255.0f);

  absl::StatusOr<Dataset> four = LoadCifar10Files({a, b}, /*max_examples=*/4);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->size, 4);
  EXPECT_EQ(four->labels, (std::vector<int32_t>{3, 9, 0, 5}));
  EXPECT_EQ(four->images, std::vector<float>(d->images.begin(),
                                             d->images.begin() + 4 * 3072));
  // Files past max_examples are not opened.
  absl::StatusOr<Dataset> two =
      LoadCifar10Files({a, TestTmpDir() + "/no-such.bin"}, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size, 2);

  // Batches of it work with the usual augmentation.
  BatcherOptions o;
  o.batch_size = 2;
  o.augment.random_crop_padding = 4;
  o.augment.horizontal_flip = true;
  o.normalize_mean.assign(kCifar10Mean, kCifar10Mean + 3);
  o.normalize_std.assign(kCifar10Std, kCifar10Std + 3);
  EXPECT_EQ(DrainCopies(*d, o).size(), 3u);
}

TEST(Cifar10Test, MissingFile) {
  const std::string a = WriteFile("cifar-m.bin", CifarRecord(1, 0));
  const std::string missing = TestTmpDir() + "/cifar-missing.bin";
  absl::StatusOr<Dataset> d = LoadCifar10Files({a, missing});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr(missing));
  EXPECT_EQ(LoadCifar10Files({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Cifar10Test, SizeNotAMultipleOfTheRecord) {
  const std::string bad = WriteFile(
      "cifar-trail.bin", CifarRecord(1, 0) + CifarRecord(2, 0) + "0123456789");
  absl::StatusOr<Dataset> d = LoadCifar10Files({bad});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr(bad));
  EXPECT_THAT(d.status().message(), HasSubstr("multiple of the 3073-byte"));
  EXPECT_THAT(d.status().message(),
              HasSubstr("10 trailing bytes at offset 6146"));

  const std::string cut =
      WriteFile("cifar-cut.bin", CifarRecord(1, 0).substr(0, 3000));
  d = LoadCifar10Files({cut});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr(cut));
  EXPECT_THAT(d.status().message(),
              HasSubstr("3000 trailing bytes at offset 0"));

  const std::string empty = WriteFile("cifar-empty.bin", "");
  d = LoadCifar10Files({empty});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr(empty));
}

TEST(Cifar10Test, LabelOutOfRange) {
  const std::string ok = WriteFile("cifar-ok.bin", CifarRecord(9, 0));
  const std::string bad =
      WriteFile("cifar-label.bin",
                CifarRecord(2, 0) + CifarRecord(10, 0) + CifarRecord(1, 0));
  absl::StatusOr<Dataset> d = LoadCifar10Files({ok, bad});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr(bad));
  EXPECT_THAT(d.status().message(),
              HasSubstr("label 10 of record 1 (byte offset 3073)"));
}

TEST(Cifar10Test, SplitFindsTheFilesDirectlyOrInTheArchiveFolder) {
  const std::string top = TestTmpDir() + "/cifar-split";
  const std::string nested = top + "/cifar-10-batches-bin";
  ASSERT_TRUE(::mkdir(top.c_str(), 0755) == 0 || errno == EEXIST);
  ASSERT_TRUE(::mkdir(nested.c_str(), 0755) == 0 || errno == EEXIST);
  for (int i = 1; i <= 5; ++i) {  // Left by an earlier run in the same dir.
    std::remove(absl::StrCat(nested, "/data_batch_", i, ".bin").c_str());
  }
  WriteFile("cifar-split/cifar-10-batches-bin/test_batch.bin",
            CifarRecord(4, 0) + CifarRecord(6, 1));
  for (const std::string& dir : {top, nested}) {
    absl::StatusOr<Dataset> d = LoadCifar10Split(dir, /*train=*/false);
    ASSERT_TRUE(d.ok()) << dir << ": " << d.status();
    EXPECT_EQ(d->labels, (std::vector<int32_t>{4, 6}));
  }
  absl::StatusOr<Dataset> train = LoadCifar10Split(top, /*train=*/true);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(train.status().message(), HasSubstr("data_batch_1.bin"));

  for (int i = 1; i <= 5; ++i) {
    WriteFile(
        absl::StrCat("cifar-split/cifar-10-batches-bin/data_batch_", i, ".bin"),
        CifarRecord(static_cast<uint8_t>(i), i));
  }
  train = LoadCifar10Split(top, /*train=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->labels, (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

// The real data set, where installed (not packaged on this project's machines).
TEST(Cifar10Test, RealTestSplit) {
  constexpr char kCifarDir[] = "/usr/share/datasets/cifar-10";
  struct stat st;
  if (::stat(kCifarDir, &st) != 0) {
    GTEST_SKIP() << kCifarDir << " is not installed";
  }
  absl::StatusOr<Dataset> d = LoadCifar10Split(kCifarDir, /*train=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 10000);
  std::vector<int> histogram(10, 0);
  for (int32_t l : d->labels) histogram.at(l)++;
  EXPECT_EQ(histogram, std::vector<int>(10, 1000));
}

TEST(FashionMnistTest, RealTestSplit) {
  struct stat st;
  if (::stat(kFashionDir, &st) != 0) {
    GTEST_SKIP() << kFashionDir << " is not installed";
  }
  absl::StatusOr<Dataset> d = LoadMnistSplit(kFashionDir, /*train=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 10000);
  EXPECT_EQ(d->height, 28);
  EXPECT_EQ(d->width, 28);
  EXPECT_EQ(d->images.size(), 10000u * 28 * 28);
  std::vector<int> histogram(10, 0);
  for (int32_t l : d->labels) histogram.at(l)++;
  EXPECT_EQ(histogram, std::vector<int>(10, 1000));
  float lo = 1, hi = 0;
  for (float p : d->images) {
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

TEST(FashionMnistTest, RealTrainSplit) {
  struct stat st;
  if (::stat(kFashionDir, &st) != 0) {
    GTEST_SKIP() << kFashionDir << " is not installed";
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Dataset> d = LoadMnistSplit(kFashionDir, /*train=*/true);
  const double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 60000);
  std::vector<int> histogram(10, 0);
  for (int32_t l : d->labels) histogram.at(l)++;
  EXPECT_EQ(histogram, std::vector<int>(10, 6000));
  std::printf("loaded Fashion-MNIST train split (60000 examples) in %.3f s\n",
              secs);
}

}  // namespace
}  // namespace downpour
