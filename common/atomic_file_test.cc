#include "common/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Whether a temporary file of `path` (`path.tmp.*`) exists beside it.
bool TmpExists(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash);
  const std::string prefix = path.substr(slash + 1) + ".tmp";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    found |= std::string(e->d_name).rfind(prefix, 0) == 0;
  }
  ::closedir(d);
  return found;
}

int Mode(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777)
                                        : -1;
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
  EXPECT_FALSE(TmpExists(path));
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
  EXPECT_FALSE(TmpExists(path));
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
    EXPECT_TRUE(TmpExists(path));
  }
  EXPECT_EQ(ReadBytes(path), "old");
  EXPECT_FALSE(TmpExists(path));
}

TEST_P(AtomicFileTest, FailedRenameRemovesTheTemporaryFile) {
  // A folder in the way: the rename over it fails.
  const std::string path = TestTmpPath("a_folder");
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  const absl::Status s = AtomicWriteFile(path, "x", GetParam());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rename"), absl::string_view::npos) << s;
  EXPECT_FALSE(TmpExists(path));
  ::rmdir(path.c_str());
}

TEST_P(AtomicFileTest, FilesAreOwnerOnlyWhateverTheUmask) {
  const mode_t old = ::umask(022);
  const std::string path = TestTmpPath("private.txt");
  ASSERT_TRUE(AtomicWriteFile(path, "secret", GetParam()).ok());
  ::umask(old);
  EXPECT_EQ(Mode(path), 0600);
}

TEST_P(AtomicFileTest, PlantedSymlinkAtTheOldTemporaryNameIsNotFollowed) {
  // The temporary name was once PATH.tmp: a symlink there made the writer
  // overwrite the file it points to.
  const std::string victim = TestTmpPath("victim.txt");
  WriteBytes(victim, "keep me");
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  const std::string path = TestTmpPath("target.txt");
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
  ASSERT_TRUE(AtomicWriteFile(path, "new", GetParam()).ok());
  EXPECT_EQ(ReadBytes(victim), "keep me");
  EXPECT_EQ(ReadBytes(path), "new");
  ::unlink((path + ".tmp").c_str());
}

TEST(CreatePrivateDirectoriesTest, NewFoldersAre0700) {
  const mode_t old = ::umask(022);
  const std::string dir = TestTmpPath("private_a/b/c");
  ASSERT_TRUE(CreatePrivateDirectories(dir).ok());
  ASSERT_TRUE(CreatePrivateDirectories(dir).ok());  // Already there.
  ::umask(old);
  EXPECT_EQ(Mode(TestTmpPath("private_a")), 0700);
  EXPECT_EQ(Mode(dir), 0700);
  const std::string file = TestTmpPath("a_file");
  WriteBytes(file, "x");
  const absl::Status s = CreatePrivateDirectories(file + "/sub");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

INSTANTIATE_TEST_SUITE_P(Durability, AtomicFileTest,
                         ::testing::Values(FileDurability::kRenameOnly,
                                           FileDurability::kFsync));

}  // namespace
}  // namespace downpour
