#include "deploy/resume_check.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/job_identity.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

LaunchOptions Options(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  LaunchOptions o;
  o.log_dir = std::string(t == nullptr ? "/tmp" : t) + "/" + name;
  std::filesystem::remove_all(o.log_dir);
  o.servers = 2;
  o.workers = 2;
  return o;
}

// The JOB files the servers of `o` write.
void WriteSnapshots(const LaunchOptions& o) {
  for (int k = 0; k < o.servers; ++k) {
    ASSERT_TRUE(ClaimCheckpointDir(
                    o.log_dir + "/ckpt/shard" + std::to_string(k),
                    LaunchJobIdentity(o))
                    .ok());
  }
}

TEST(ResumeCheckTest, EmptyFolderStartsWithoutResumeOnly) {
  LaunchOptions o = Options("empty");
  EXPECT_EQ(CheckLogDirForResume(o).value(), "");
  o.resume = true;
  const absl::Status s = CheckLogDirForResume(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("nothing to resume"));
  o.log_dir.clear();
  EXPECT_EQ(CheckLogDirForResume(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResumeCheckTest, SameJobNeedsResume) {
  LaunchOptions o = Options("same");
  WriteSnapshots(o);
  const absl::Status s = CheckLogDirForResume(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("add --resume to continue it"));
  std::ofstream(o.log_dir + "/ckpt/worker1.position") << "x";
  o.resume = true;
  EXPECT_EQ(CheckLogDirForResume(o).value(),
            "launch: resuming the job in " + o.log_dir +
                " from the snapshots of 2 shards and the data positions of 1 "
                "of 2 workers");
}

TEST(ResumeCheckTest, AnotherJobIsRefusedNamingTheDifference) {
  LaunchOptions first = Options("other");
  WriteSnapshots(first);
  LaunchOptions second = first;
  second.max_train_examples = 12000;
  for (bool resume : {false, true}) {
    second.resume = resume;
    const absl::Status s = CheckLogDirForResume(second).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(),
                HasSubstr("holds the snapshots of another job "
                          "(max_train_examples 0 there, 12000 here)"));
  }
  LaunchOptions fewer = first;
  fewer.servers = 1;
  EXPECT_THAT(CheckLogDirForResume(fewer).status().message(),
              HasSubstr("shards 2 there, 1 here"));
}

TEST(ResumeCheckTest, FinishedTrainingResumesNothing) {
  LaunchOptions o = Options("trained");
  WriteSnapshots(o);
  std::ofstream(o.log_dir + "/ckpt/" + kTrainedMarker) << "done\n";
  o.resume = true;
  const absl::Status s = CheckLogDirForResume(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("nothing to resume"));
}

TEST(ResumeCheckTest, ResumeCommandAddsWhatIsMissing) {
  EXPECT_EQ(ResumeCommand({"bin/launch", "--workers=2"}, "/tmp/d"),
            "bin/launch --workers=2 --log_dir=/tmp/d --resume");
  EXPECT_EQ(ResumeCommand({"launch", "--log_dir=/x", "--resume"}, "/x"),
            "launch --log_dir=/x --resume");
  EXPECT_EQ(ResumeCommand({"launch", "--worker_args=--device=cpu --x=1"}, "/a b"),
            "launch '--worker_args=--device=cpu --x=1' '--log_dir=/a b' --resume");
}

}  // namespace
}  // namespace downpour
