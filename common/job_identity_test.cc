#include "common/job_identity.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t == nullptr ? "/tmp" : t) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(JobIdentityTest, TextListsTheShapeInOrder) {
  JobIdentity id;
  id.shards = 2;
  id.workers = 4;
  id.epochs = 5;
  id.max_train_examples = 12000;
  EXPECT_EQ(JobIdentityText(id),
            "shards=2 workers=4 mode=async epochs=5 batch_size=64 n_push=1 "
            "dataset=fashion_mnist max_train_examples=12000 replicas=1 "
            "local_aggregation=sum");
}

TEST(JobIdentityTest, DifferenceNamesEachValue) {
  EXPECT_EQ(JobIdentityDifference("a=1 b=2 c=3", "a=1 b=5 c=3"),
            "b 2 there, 5 here");
  EXPECT_EQ(JobIdentityDifference("a=1 old=2", "a=1 new=3"),
            "new (none) there, 3 here; old 2 there, (none) here");
  EXPECT_EQ(JobIdentityDifference("a=1", "a=1"), "");
}

TEST(JobIdentityTest, ClaimWritesThenAcceptsTheSameJob) {
  const std::string dir = TmpDir("claim_same") + "/ckpt/shard0";
  EXPECT_FALSE(ReadJobIdentity(dir).value().has_value());
  ASSERT_TRUE(ClaimCheckpointDir(dir, "shards=1 epochs=3").ok());
  EXPECT_EQ(ReadJobIdentity(dir).value().value(), "shards=1 epochs=3");
  EXPECT_TRUE(ClaimCheckpointDir(dir, "shards=1 epochs=3").ok());
  // A caller that does not know the job keeps the identity there.
  EXPECT_TRUE(ClaimCheckpointDir(dir, "").ok());
  EXPECT_EQ(ReadJobIdentity(dir).value().value(), "shards=1 epochs=3");
}

TEST(JobIdentityTest, ClaimRefusesAnotherJobNamingTheDifference) {
  const std::string dir = TmpDir("claim_other");
  ASSERT_TRUE(ClaimCheckpointDir(dir, "shards=1 epochs=3").ok());
  const absl::Status s = ClaimCheckpointDir(dir, "shards=1 epochs=5");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("holds the snapshots of another job "
                                     "(epochs 3 there, 5 here)"));
  EXPECT_THAT(s.message(), HasSubstr("fresh --checkpoint_dir"));
  EXPECT_EQ(ReadJobIdentity(dir).value().value(), "shards=1 epochs=3");
}

TEST(JobIdentityTest, FinishedJobIsRefused) {
  const std::string dir = TmpDir("claim_finished");
  ASSERT_TRUE(ClaimCheckpointDir(dir, "shards=1").ok());
  ASSERT_TRUE(MarkJobFinished(dir).ok());
  const absl::Status s = ClaimCheckpointDir(dir, "shards=1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("a job that finished; nothing to resume"));
  // Another job's folder says what differs first.
  EXPECT_THAT(ClaimCheckpointDir(dir, "shards=2").message(),
              HasSubstr("shards 1 there, 2 here"));
}

TEST(JobIdentityTest, DamagedFileIsNamed) {
  const std::string dir = TmpDir("claim_damaged");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/JOB") << "something else\n";
  EXPECT_EQ(ReadJobIdentity(dir).status().code(), absl::StatusCode::kDataLoss);
  const absl::Status s = ClaimCheckpointDir(dir, "shards=1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is not a readable job file"));
}

TEST(JobIdentityTest, UnwritableFolderIsRefused) {
  const absl::Status s = ClaimCheckpointDir("/sys/downpour_ckpt", "shards=1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--checkpoint_dir=/sys/downpour_ckpt"));
}

}  // namespace
}  // namespace downpour
