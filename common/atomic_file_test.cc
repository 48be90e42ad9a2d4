#include "common/atomic_file.h"

#include <sys/stat.h>

#include <string>
#include <utility>

#include "common/test_files.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class AtomicFileTest : public ::testing::TestWithParam<FileDurability> {};

TEST_P(AtomicFileTest, WritesAndOverwritesLeavingNoTemporaryFile) {
  const std::string path = TestTmpPath(
      GetParam() == FileDurability::kFsync ? "durable.txt" : "plain.txt");
  ASSERT_TRUE(AtomicWriteFile(path, "first, the longer one\n", GetParam()).ok());
  EXPECT_EQ(ReadBytes(path), "first, the longer one\n");
  ASSERT_TRUE(AtomicWriteFile(path, "second\n", GetParam()).ok());
  EXPECT_EQ(ReadBytes(path), "second\n");
  ASSERT_TRUE(AtomicWriteFile(path, "", GetParam()).ok());
  EXPECT_TRUE(Exists(path));
  EXPECT_EQ(ReadBytes(path), "");
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST_P(AtomicFileTest, MissingFolderNamesThePath) {
  const std::string path = TestTmpPath("no/such/folder/x.txt");
  const absl::Status s = AtomicWriteFile(path, "y", GetParam());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(path), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("No such file or directory"),
            absl::string_view::npos)
      << s;
  EXPECT_FALSE(Exists(path));
}

TEST_P(AtomicFileTest, WriterStreamsAndCommits) {
  const std::string path = TestTmpPath("streamed.bin");
  WriteBytes(path, "old");
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path, GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append("ab").ok());
  ASSERT_TRUE(w->Append(std::string(3, '\0')).ok());
  EXPECT_EQ(ReadBytes(path), "old");  // Not replaced before the commit.
  AtomicFileWriter moved = std::move(*w);
  ASSERT_TRUE(moved.Commit().ok());
  EXPECT_EQ(ReadBytes(path), std::string("ab\0\0\0", 5));
  EXPECT_FALSE(Exists(path + ".tmp"));
  EXPECT_FALSE(moved.Append("late").ok());
}

TEST_P(AtomicFileTest, AbandonedWriterLeavesTheOldFile) {
  const std::string path = TestTmpPath("abandoned.txt");
  WriteBytes(path, "old");
  {
    absl::StatusOr<AtomicFileWriter> w =
        AtomicFileWriter::Open(path, GetParam());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append("new").ok());
    EXPECT_TRUE(Exists(path + ".tmp"));
  }
  EXPECT_EQ(ReadBytes(path), "old");
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST_P(AtomicFileTest, FailedRenameRemovesTheTemporaryFile) {
  // A folder in the way: the rename over it fails.
  const std::string path = TestTmpPath("a_folder");
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  const absl::Status s = AtomicWriteFile(path, "x", GetParam());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rename"), absl::string_view::npos) << s;
  EXPECT_FALSE(Exists(path + ".tmp"));
  ::rmdir(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Durability, AtomicFileTest,
                         ::testing::Values(FileDurability::kRenameOnly,
                                           FileDurability::kFsync));

}  // namespace
}  // namespace downpour
