// File: worker/data/cifar10_reader_test.cc
//
// Tests for the CIFAR-10 reader over small files written to TEST_TMPDIR, and
// the real test split when installed.
#include "worker/data/cifar10_reader.h"

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
#include "worker/data/data_test_util.h"

namespace downpour {
namespace data_testing {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace data_testing
}  // namespace downpour
