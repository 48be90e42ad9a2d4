// File: worker/data/dataset_info_test.cc
//
// Counting a training set without loading it (real Fashion-MNIST, generated
// IDX and CIFAR-10 files, bad files) and the data split.
#include "worker/data/dataset_info.h"

#include <sys/stat.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data_test_util.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using data_testing::CifarRecord;
using data_testing::kFashionDir;
using data_testing::WriteFile;

std::string Dir(const std::string& name) {
  const std::string dir = TestTmpDir() + "/" + name;
  mkdir(dir.c_str(), 0755);  // EEXIST is fine.
  return dir;
}

TEST(DatasetInfoTest, CountsTheRealFashionMnistTrainingSet) {
  struct stat st;
  if (stat((std::string(kFashionDir) + "/train-labels-idx1-ubyte.gz").c_str(),
           &st) != 0) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  absl::StatusOr<int64_t> n =
      CountTrainingExamples(DatasetKind::kFashionMnist, kFashionDir, 0);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 60000);
  n = CountTrainingExamples(DatasetKind::kFashionMnist, kFashionDir, 6000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 6000);
}

TEST(DatasetInfoTest, ReadsARawHeaderAndRefusesBadFiles) {
  Dir("idx");
  // Magic 0x00000801 (unsigned byte, rank 1), count 0x00012345, 3 labels.
  WriteFile("idx/train-labels-idx1-ubyte",
            std::string("\x00\x00\x08\x01\x00\x01\x23\x45\x01\x02\x03", 11));
  const std::string dir = TestTmpDir() + "/idx";
  absl::StatusOr<int64_t> n =
      CountTrainingExamples(DatasetKind::kFashionMnist, dir, 0);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0x12345);

  WriteFile("idx/train-labels-idx1-ubyte", "not idx");
  n = CountTrainingExamples(DatasetKind::kFashionMnist, dir, 0);
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("bad header"));

  n = CountTrainingExamples(DatasetKind::kFashionMnist, Dir("empty"), 0);
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()),
              HasSubstr("train-labels-idx1-ubyte"));
}

TEST(DatasetInfoTest, CountsCifarRecordsFromTheFileSizes) {
  Dir("cifar");
  for (int i = 1; i <= 5; ++i) {
    std::string records;
    for (int k = 0; k < i; ++k) records += CifarRecord(k % 10, i * 10 + k);
    WriteFile("cifar/data_batch_" + std::to_string(i) + ".bin", records);
  }
  const std::string dir = TestTmpDir() + "/cifar";
  absl::StatusOr<int64_t> n = CountTrainingExamples(DatasetKind::kCifar10, dir, 0);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1 + 2 + 3 + 4 + 5);
  WriteFile("cifar/data_batch_3.bin", "short");
  n = CountTrainingExamples(DatasetKind::kCifar10, dir, 0);
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("data_batch_3.bin"));
}

TEST(DatasetInfoTest, ReplicasReadInterleavedShards) {
  const DataShard s = ReplicaShard(/*worker=*/1, /*workers=*/2, /*replica=*/1,
                                   /*replicas=*/3);
  EXPECT_EQ(s.index, 4);
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(ExamplesInShard(10, DataShard{0, 3}), 4);  // 0 3 6 9
  EXPECT_EQ(ExamplesInShard(10, DataShard{1, 3}), 3);  // 1 4 7
  EXPECT_EQ(ExamplesInShard(2, DataShard{2, 3}), 0);
  EXPECT_EQ(ShardExampleIndices(10, DataShard{1, 3}),
            (std::vector<int64_t>{1, 4, 7}));
  for (int64_t n : {0, 1, 7, 60000}) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(static_cast<int64_t>(ShardExampleIndices(n, {i, 4}).size()),
                ExamplesInShard(n, {i, 4}));
    }
  }
}

}  // namespace
}  // namespace downpour
