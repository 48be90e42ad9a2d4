#include "worker/data_position.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

// A path in the test's private temporary folder.
std::string TestTmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(DataPositionTest, WritesReadsAndRemoves) {
  const std::string path = TestTmpPath("position_rw");
  std::remove(path.c_str());
  DataPositionFile pos(path, "worker=1 workers=2");
  EXPECT_EQ(pos.Read(), 0);  // No file yet.
  ASSERT_TRUE(pos.Write(17).ok());
  EXPECT_EQ(pos.Read(), 17);
  ASSERT_TRUE(pos.Write(18).ok());  // Replaced, not appended.
  EXPECT_EQ(DataPositionFile(path, "worker=1 workers=2").Read(), 18);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  ASSERT_TRUE(pos.Remove().ok());
  EXPECT_EQ(pos.Read(), 0);
  EXPECT_TRUE(pos.Remove().ok());  // Nothing to remove.
}

// The first write renames a new file into place; the later ones rewrite
// that file, whatever the number of digits, and a file removed behind the
// writer's back is written anew.
TEST(DataPositionTest, LaterWritesRewriteTheSameFile) {
  const std::string path = TestTmpPath("position_in_place");
  std::remove(path.c_str());
  DataPositionFile pos(path, "k");
  ASSERT_TRUE(pos.Write(9).ok());
  struct stat first;
  ASSERT_EQ(::stat(path.c_str(), &first), 0);
  for (int64_t steps : {int64_t{10}, int64_t{11}, int64_t{999}, int64_t{1000},
                        int64_t{123456789012}}) {
    ASSERT_TRUE(pos.Write(steps).ok());
    EXPECT_EQ(DataPositionFile(path, "k").Read(), steps);
  }
  struct stat later;
  ASSERT_EQ(::stat(path.c_str(), &later), 0);
  EXPECT_EQ(later.st_ino, first.st_ino);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "downpour data position v1\nkey k\nsteps 123456789012\n");
  std::remove(path.c_str());
  ASSERT_TRUE(pos.Write(123456789013).ok());
  EXPECT_EQ(DataPositionFile(path, "k").Read(), 123456789013);
  ASSERT_TRUE(pos.Remove().ok());
  EXPECT_EQ(pos.Read(), 0);
  ASSERT_TRUE(pos.Write(5).ok());  // After a Remove: a new file.
  EXPECT_EQ(pos.Read(), 5);
}

TEST(DataPositionTest, AnotherKeyOrGarbageStartsFromTheBeginning) {
  const std::string path = TestTmpPath("position_key");
  ASSERT_TRUE(DataPositionFile(path, "worker=0 workers=2").Write(9).ok());
  EXPECT_EQ(DataPositionFile(path, "worker=1 workers=2").Read(), 0);
  EXPECT_EQ(DataPositionFile(path, "worker=0 workers=2").Read(), 9);
  std::ofstream(path) << "downpour data position v1\nkey k\nsteps -3\n";
  EXPECT_EQ(DataPositionFile(path, "k").Read(), 0);
  std::ofstream(path) << "downpour data position v1\nkey k\nste";
  EXPECT_EQ(DataPositionFile(path, "k").Read(), 0);
  std::ofstream(path) << "downpour data position v1\nkey k\nsteps 5\n";
  EXPECT_EQ(DataPositionFile(path, "k").Read(), 5);
}

TEST(DataPositionTest, CreatesItsFolder) {
  const std::string path = TestTmpPath("position_dir/sub/worker0.position");
  DataPositionFile pos(path, "k");
  ASSERT_TRUE(pos.Write(4).ok());
  EXPECT_EQ(pos.Read(), 4);
}

TEST(DataPositionTest, UnwritablePlaceIsAnErrorNamingIt) {
  DataPositionFile pos("/proc/no-such-dir/position", "k");
  const absl::Status s = pos.Write(1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc/no-such-dir/position"), std::string::npos);
}

}  // namespace
}  // namespace downpour
