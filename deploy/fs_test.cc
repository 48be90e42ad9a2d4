// File: deploy/fs_test.cc
//
// Finding sibling binaries, port files, atomic writes and log directories.
#include "deploy/fs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

void WriteExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);
}

TEST(FindSiblingBinaryTest, PrefersRunfilesThenSiblingDir) {
  const std::string root = absl::StrCat(TestTmpDir(), "/find");
  for (const char* d :
       {"", "/bin", "/bin/deploy", "/bin/server", "/bin/deploy/launch.runfiles",
        "/bin/deploy/launch.runfiles/downpour",
        "/bin/deploy/launch.runfiles/downpour/server"}) {
    mkdir((root + d).c_str(), 0755);
  }
  const std::string exe = root + "/bin/deploy/launch";
  unsetenv("RUNFILES_DIR");
  WriteExecutable(root + "/bin/server/ps_server", "#!/bin/sh\n");
  auto found = FindSiblingBinary({exe}, "server/ps_server");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, root + "/bin/deploy/../server/ps_server");

  WriteExecutable(root + "/bin/deploy/launch.runfiles/downpour/server/ps_server",
                  "#!/bin/sh\n");
  found = FindSiblingBinary({exe}, "server/ps_server");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, exe + ".runfiles/downpour/server/ps_server");

  auto missing = FindSiblingBinary({exe}, "worker/ps_worker");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr(root + "/bin/deploy/../worker/ps_worker"));
}

TEST(FsTest, ReadPortFile) {
  const std::string path = TestTmpPath("port");
  EXPECT_FALSE(ReadPortFile(path).has_value());  // Missing.
  WriteBytes(path, " 7001\n");
  EXPECT_EQ(ReadPortFile(path), 7001);
  for (const char* bad : {"", "70000", "0", "-3", "12ab"}) {
    WriteBytes(path, bad);
    EXPECT_FALSE(ReadPortFile(path).has_value()) << bad;
  }
}

TEST(FsTest, WriteFileAtomicallyAndDirectories) {
  const std::string dir = TestTmpPath("a/b/c");
  ASSERT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(IsDirectory(dir));
  EXPECT_FALSE(IsExecutableFile(dir));
  const std::string file = dir + "/x.json";
  ASSERT_TRUE(WriteFileAtomically(file, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(file, "two\n").ok());
  EXPECT_EQ(ReadBytes(file), "two\n");
  EXPECT_FALSE(WriteFileAtomically(dir + "/no/such/x", "y").ok());

  absl::StatusOr<std::string> given = PrepareLogDir(dir + "/logs");
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, dir + "/logs");
  EXPECT_TRUE(IsDirectory(*given));
  setenv("TMPDIR", dir.c_str(), 1);
  absl::StatusOr<std::string> fresh = PrepareLogDir("");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(*fresh, HasSubstr(dir + "/downpour-launch-"));
  EXPECT_TRUE(IsDirectory(*fresh));
}

}  // namespace
}  // namespace downpour
