// File: worker/data/data_test.cc
//
// Tests for the IDX reader and the Batcher. Small IDX files are written to
// TEST_TMPDIR, raw and gzipped; the real Fashion-MNIST files are used when
// installed under /usr/share/datasets/fashion-mnist/.
#include "worker/data/data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

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
  const std::string path = TmpDir() + "/" + name;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
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
  const std::string ip = TmpDir() + "/" + Name("no-such-images");
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
  const std::string dir = TmpDir() + "/split";
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
