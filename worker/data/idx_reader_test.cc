// File: worker/data/idx_reader_test.cc
//
// Tests for the IDX reader. Small IDX files are written to TEST_TMPDIR (raw
// and gzipped); the real Fashion-MNIST files are used when installed under
// /usr/share/datasets/fashion-mnist/.
#include "worker/data/idx_reader.h"

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
#include <memory>
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
#include "worker/data/data_test_util.h"

namespace downpour {
namespace data_testing {
namespace {

using ::testing::HasSubstr;

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

  // The source that keeps the u8 pixels reads the same floats.
  for (int64_t max : {0, 2}) {
    absl::StatusOr<std::unique_ptr<ExampleSource>> src = OpenIdx(ip, lp, max);
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ((*src)->size(), max == 0 ? 3 : 2);
    EXPECT_EQ((*src)->channels(), 1);
    EXPECT_EQ((*src)->height(), 4);
    EXPECT_EQ((*src)->width(), 5);
    for (int64_t i = 0; i < (*src)->size(); ++i) {
      std::vector<float> x(20, -1.f);
      int32_t label = -1;
      ASSERT_TRUE((*src)->Read(i, x.data(), &label).ok());
      EXPECT_EQ(x, std::vector<float>(d->images.begin() + 20 * i,
                                      d->images.begin() + 20 * (i + 1)));
      EXPECT_EQ(label, d->labels[i]);
    }
  }
  EXPECT_EQ(OpenIdx(ip + ".missing", lp).status().code(),
            absl::StatusCode::kNotFound);
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

// Two gzip members one after the other (as `cat a.gz b.gz` makes): the
// whole of both, as gunzip gives it.
TEST(IdxGzipTest, SeveralMembersAreReadWhole) {
  const std::vector<uint8_t> px = Pixels(6 * 64);
  const std::string idx = ImagesIdx(6, 8, 8, px);
  const std::string a = ReadBytes(WriteFile("half-a.gz", idx.substr(0, 100)));
  const std::string b = ReadBytes(WriteFile("half-b.gz", idx.substr(100)));
  const std::string ip = TestTmpDir() + "/members-images.gz";
  WriteBytes(ip, a + b);
  const std::string lp =
      WriteFile("members-labels.gz", LabelsIdx({1, 2, 3, 4, 5, 6}));
  absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->images.size(), px.size());
  for (size_t i = 0; i < px.size(); ++i) {
    ASSERT_EQ(d->images[i], static_cast<float>(px[i]) / 255.0f) << i;
  }
}

// A trailer whose length does not match the data (too small, too large, or
// more than deflate can expand the file to) is an error naming the file,
// never a buffer of the length it claims.
TEST(IdxGzipTest, ATrailerThatLiesIsAnError) {
  const std::string lp =
      WriteFile("lying-labels.gz", LabelsIdx(std::vector<uint8_t>(50, 3)));
  const std::string good =
      ReadBytes(WriteFile("lying-src.gz", ImagesIdx(50, 8, 8, Pixels(50 * 64))));
  for (const uint32_t size : {3216u - 1, 3216u + 1, 0xfffffff0u}) {
    std::string gz = good;
    for (int k = 0; k < 4; ++k) {
      gz[gz.size() - 4 + k] = static_cast<char>((size >> (8 * k)) & 0xff);
    }
    const std::string ip = TestTmpDir() + "/lying-images.gz";
    WriteBytes(ip, gz);
    absl::StatusOr<Dataset> d = LoadIdxDataset(ip, lp);
    ASSERT_FALSE(d.ok()) << size;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << size;
    EXPECT_THAT(d.status().message(), HasSubstr(ip));
  }
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
  // Training reads the split through the source that keeps u8 pixels: the
  // same floats and labels, example by example.
  absl::StatusOr<std::unique_ptr<ExampleSource>> src =
      OpenMnistSplit(kFashionDir, /*train=*/true);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->size(), 60000);
  std::vector<float> x(28 * 28);
  for (int64_t i = 0; i < 60000; i += 997) {
    int32_t label = -1;
    ASSERT_TRUE((*src)->Read(i, x.data(), &label).ok());
    ASSERT_TRUE(std::equal(x.begin(), x.end(), d->images.begin() + i * 784)) << i;
    ASSERT_EQ(label, d->labels[i]) << i;
  }
}

}  // namespace
}  // namespace data_testing
}  // namespace downpour
