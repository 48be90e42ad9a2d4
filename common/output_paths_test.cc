#include "common/output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace downpour {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

TEST(OutputPathsTest, CreatesMissingFolders) {
  const std::string file = TmpDir() + "/op/a/b/summary.json";
  EXPECT_TRUE(PrepareOutputFile("summary_json", file).ok());
  struct stat st;
  EXPECT_EQ(stat((TmpDir() + "/op/a/b").c_str(), &st), 0);
  EXPECT_NE(stat(file.c_str(), &st), 0);  // The file itself is not made.
  EXPECT_TRUE(PrepareOutputDir("log_dir", TmpDir() + "/op/logs/x").ok());
  EXPECT_TRUE(PrepareOutputFile("save_params", "").ok());
}

TEST(OutputPathsTest, RefusesWhatCannotBeWritten) {
  // A folder this process may not write in: a 0555 one, or, for root, whom
  // modes do not stop, sysfs.
  std::string ro = TmpDir() + "/op_ro";
  mkdir(ro.c_str(), 0555);
  chmod(ro.c_str(), 0555);
  if (access(ro.c_str(), W_OK) == 0) ro = "/sys";
  absl::Status s = PrepareOutputFile("save_params", ro + "/m.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "--save_params=" + ro + "/m.safetensors: cannot "
                         "write in " + ro + ": Permission denied");
  EXPECT_FALSE(PrepareOutputFile("summary_json", ro + "/sub/s.json").ok());
  std::ofstream(TmpDir() + "/op_file") << "x";
  EXPECT_FALSE(PrepareOutputFile("curve_csv", TmpDir() + "/op_file/c.csv").ok());
  EXPECT_FALSE(PrepareOutputFile("save_params", TmpDir()).ok());  // A folder.
}

}  // namespace
}  // namespace downpour
