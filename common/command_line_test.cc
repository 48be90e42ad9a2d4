#include "common/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, servers, 2, "test flag");
ABSL_FLAG(int, workers, 2, "test flag");
ABSL_FLAG(bool, secure, false, "test flag");
ABSL_FLAG(std::string, save_params, "", "test flag");

namespace downpour {
namespace {

absl::Status Check(std::vector<std::string> args) { return CheckFlagArgs(args); }

TEST(CommandLineTest, KnownFlagsInEveryFormPass) {
  EXPECT_TRUE(Check({"--servers=3", "-workers", "4", "--secure",
                     "--nosecure", "--save_params=/tmp/x", "positional"})
                  .ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_workers), 4);  // Stored as parsed.
  EXPECT_TRUE(Check({"--", "--not_a_flag"}).ok());
  EXPECT_TRUE(Check({"-"}).ok());
}

TEST(CommandLineTest, UnknownFlagSuggestsTheClosest) {
  absl::Status s = Check({"--servrs=2"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown flag --servrs; did you mean --servers?");
  EXPECT_EQ(Check({"--save=1"}).message(),
            "unknown flag --save; did you mean --save_params?");
  EXPECT_EQ(Check({"--completely_different"}).message(),
            "unknown flag --completely_different");
}

TEST(CommandLineTest, UndefOkLetsNamesThrough) {
  EXPECT_TRUE(Check({"--bind=0.0.0.0", "--undefok=bind,epochs"}).ok());
  EXPECT_FALSE(Check({"--bind=0.0.0.0", "--undefok=epochs"}).ok());
}

TEST(CommandLineTest, BadOrMissingValues) {
  absl::Status s = Check({"--servers=abc"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad value 'abc' for --servers"),
            absl::string_view::npos)
      << s;
  EXPECT_FALSE(Check({"--secure=maybe"}).ok());
  EXPECT_EQ(Check({"--servers"}).message(),
            "--servers needs a value (--servers=VALUE)");
  EXPECT_FALSE(Check({"--nosecure=1"}).ok());
}

TEST(CommandLineTest, FlagfileThatCannotBeOpenedIsABadFlag) {
  const absl::Status s = Check({"--flagfile=/no/such/file.flags"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--flagfile=/no/such/file.flags: cannot open the file (No such "
            "file or directory)");
  EXPECT_FALSE(Check({"--flagfile", "/no/such/file.flags"}).ok());
  EXPECT_TRUE(Check({"--flagfile=/dev/null"}).ok());
}

TEST(CommandLineTest, HelpRequests) {
  EXPECT_TRUE(FindHelpRequest({"--servers=1", "--help"}).help);
  EXPECT_TRUE(FindHelpRequest({"-h"}).help);
  EXPECT_TRUE(FindHelpRequest({"--helpfull"}).help);
  EXPECT_FALSE(FindHelpRequest({"--", "--help"}).help);
  EXPECT_FALSE(FindHelpRequest({"--servers=2"}).help);
  const CommandLineRequest r = FindHelpRequest({"--helpmatch=launch"});
  EXPECT_TRUE(r.help);
  EXPECT_EQ(r.help_filter, "launch");
}

TEST(CommandLineTest, ClosestFlagName) {
  EXPECT_EQ(ClosestFlagName("worker"), "workers");
  EXPECT_EQ(ClosestFlagName("xyz_unrelated"), "");
}

}  // namespace
}  // namespace downpour
