#include "deploy/subprocess.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Subprocess> StartShell(const std::string& script,
                                       const std::string& log_path = "") {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.log_path = log_path;
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(SubprocessTest, CapturesStdoutAndStderrLinesAndExitCode) {
  std::string log = TestTmpPath("capture.log");
  auto p = StartShell(
      "echo one; echo two >&2; printf 'three\\r\\nfour'; exit 3", log);
  ASSERT_NE(p, nullptr);
  std::vector<std::string> lines;
  ASSERT_TRUE(p->WaitFor(absl::Seconds(10), &lines));
  // The unterminated last line arrives once the pipe reaches end-of-file.
  while (!p->output_closed()) {
    Subprocess::PollOutput({p.get()}, absl::Milliseconds(50));
    p->ReadAvailable(&lines);
  }
  EXPECT_THAT(lines, ElementsAre("one", "two", "three", "four"));
  EXPECT_EQ(p->exit_status().exit_code, 3);
  EXPECT_EQ(p->exit_status().signal, 0);
  EXPECT_FALSE(p->exit_status().success());
  EXPECT_EQ(p->exit_status().ToString(), "exit code 3");
  EXPECT_THAT(p->tail(), ElementsAre("one", "two", "three", "four"));

  EXPECT_EQ(ReadBytes(log), "one\ntwo\nthree\r\nfour");
}

TEST(SubprocessTest, SuccessfulExit) {
  auto p = StartShell("true");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitFor(absl::Seconds(10), nullptr));
  EXPECT_TRUE(p->exit_status().success());
}

TEST(SubprocessTest, TailKeepsOnlyRecentLines) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; done"};
  o.tail_lines = 3;
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->WaitFor(absl::Seconds(10), nullptr));
  EXPECT_THAT((*p)->tail(), ElementsAre("4", "5", "6"));
}

TEST(SubprocessTest, MissingProgramFailsToStart) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/program", "--flag"};
  auto p = Subprocess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("/nonexistent/program"));
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // Nothing left to reap.
}

TEST(SubprocessTest, ExtraEnvIsVisible) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"$DP_TEST_VAR\""};
  o.extra_env = {"DP_TEST_VAR=hello"};
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok());
  std::vector<std::string> lines;
  ASSERT_TRUE((*p)->WaitFor(absl::Seconds(10), &lines));
  EXPECT_THAT(lines, ElementsAre("hello"));
}

TEST(SubprocessTest, WaitForLineFindsLineAndTimesOut) {
  auto p = StartShell("echo starting; echo ready 42; sleep 30");
  ASSERT_NE(p, nullptr);
  std::vector<std::string> seen;
  absl::StatusOr<std::string> line = p->WaitForLine(
      [](const std::string& l) { return l.rfind("ready", 0) == 0; },
      absl::Seconds(10), &seen);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "ready 42");
  EXPECT_THAT(seen, ElementsAre("starting", "ready 42"));

  absl::StatusOr<std::string> never = p->WaitForLine(
      [](const std::string&) { return true; }, absl::Milliseconds(200),
      nullptr);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SubprocessTest, WaitForLineReportsEarlyExit) {
  auto p = StartShell("echo nope; exit 4");
  ASSERT_NE(p, nullptr);
  absl::StatusOr<std::string> line = p->WaitForLine(
      [](const std::string& l) { return l == "ready"; }, absl::Seconds(10),
      nullptr);
  EXPECT_EQ(line.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(line.status().message()), HasSubstr("exit code 4"));
}

TEST(SubprocessTest, TerminateStopsWholeProcessGroupAndReaps) {
  // The shell starts a background sleep and reports its pid; both must die.
  auto p = StartShell("sleep 60 & echo $!; wait");
  ASSERT_NE(p, nullptr);
  absl::StatusOr<std::string> line = p->WaitForLine(
      [](const std::string&) { return true; }, absl::Seconds(10), nullptr);
  ASSERT_TRUE(line.ok()) << line.status();
  pid_t grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(*line, &grandchild));
  EXPECT_EQ(getpgid(p->pid()), p->pid());
  EXPECT_EQ(getpgid(grandchild), p->pid());

  const pid_t pid = p->pid();
  ExitStatus st = p->Terminate(absl::Seconds(5));
  EXPECT_EQ(st.signal, SIGTERM);
  EXPECT_TRUE(p->exited());
  // No zombie: the child has been reaped.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // The grandchild (not our child, so reaped by init) goes away too.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (ProcessExists(grandchild) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(ProcessExists(grandchild));
}

TEST(SubprocessTest, TerminateEscalatesToSigkill) {
  auto p = StartShell("trap '' TERM; echo armed; while :; do sleep 0.1; done");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForLine([](const std::string& l) { return l == "armed"; },
                             absl::Seconds(10), nullptr)
                  .ok());
  const absl::Time start = absl::Now();
  ExitStatus st = p->Terminate(absl::Milliseconds(300));
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(st.ToString(), HasSubstr("signal 9"));
}

TEST(SubprocessTest, DestructorKillsAndReaps) {
  pid_t pid;
  {
    auto p = StartShell("sleep 60");
    ASSERT_NE(p, nullptr);
    pid = p->pid();
    EXPECT_FALSE(p->CheckExited());
  }
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_FALSE(ProcessExists(pid));
}

TEST(SubprocessTest, ChildGetsDefaultSignalDispositions) {
  // Even if the parent ignores SIGTERM, the child must not inherit that.
  struct sigaction ign = {}, old = {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTERM, &ign, &old);
  auto p = StartShell("echo up; sleep 60");
  sigaction(SIGTERM, &old, nullptr);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForLine([](const std::string& l) { return l == "up"; },
                             absl::Seconds(10), nullptr)
                  .ok());
  ExitStatus st = p->Terminate(absl::Seconds(5));
  EXPECT_EQ(st.signal, SIGTERM);
}

}  // namespace
}  // namespace downpour
