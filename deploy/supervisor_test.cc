// File: deploy/supervisor_test.cc
//
// The Supervisor over a fake ProcessLauncher (scripted output and exits, no
// processes): line prefixes and observation, reaping, stopping, failure
// messages and the stop signal.
#include "deploy/supervisor.h"

#include <signal.h>

#include <atomic>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A process whose output and exit the test scripts.
class FakeProcess : public Process {
 public:
  std::vector<std::string> pending;  // Handed out by the next ReadAvailable.
  bool exited = false;
  bool ignores_sigterm = false;
  std::vector<int> signals;
  // Every signal of every process, as "<name> <signal>", when set.
  std::vector<std::string>* order = nullptr;
  std::string name;
  ExitStatus status;
  std::deque<std::string> tail_lines;

  void ReadAvailable(std::vector<std::string>* lines) override {
    for (const std::string& l : pending) {
      tail_lines.push_back(l);
      if (lines != nullptr) lines->push_back(l);
    }
    pending.clear();
  }
  bool CheckExited() override { return exited; }
  const ExitStatus& exit_status() const override { return status; }
  absl::Status Signal(int sig) override {
    signals.push_back(sig);
    if (order != nullptr) order->push_back(absl::StrCat(name, " ", sig));
    if (sig == SIGTERM && !ignores_sigterm) Exit(0);
    return absl::OkStatus();
  }
  ExitStatus Terminate(absl::Duration, std::vector<std::string>* lines) override {
    ReadAvailable(lines);
    if (!exited) {
      if (order != nullptr) order->push_back(absl::StrCat(name, " ", SIGKILL));
      status.signal = SIGKILL;
      exited = true;
    }
    return status;
  }
  const std::deque<std::string>& tail() const override { return tail_lines; }

  void Exit(int code) {
    exited = true;
    status.exit_code = code;
  }
};

class FakeLauncher : public ProcessLauncher {
 public:
  std::map<std::string, FakeProcess*> started;  // By task name; not owned.
  std::vector<std::string> signal_order;        // Of every process started.
  bool fail_next = false;

  absl::StatusOr<std::unique_ptr<Process>> Start(const TaskSpec& spec) override {
    if (fail_next) return absl::NotFoundError("no such binary");
    auto p = std::make_unique<FakeProcess>();
    p->name = spec.name;
    p->order = &signal_order;
    started[spec.name] = p.get();
    return p;
  }
  void WaitForOutput(const std::vector<Process*>&, absl::Duration) override {}
};

TaskSpec Spec(TaskRole role, const std::string& name) {
  TaskSpec t;
  t.role = role;
  t.name = name;
  t.host = kDefaultHost;
  return t;
}

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest() {
    options_.log_dir = "/logs";
    options_.stop_grace = absl::Milliseconds(50);
    options_.failure_tail_lines = 2;
    options_.stop_signal = &stop_;
  }
  Supervisor Make() {
    return Supervisor(&launcher_, out_, options_,
                      [this](const Supervisor::Child& c, const std::string& l) {
                        observed_.push_back(c.name() + "|" + l);
                      });
  }

  FakeLauncher launcher_;
  std::ostringstream out_;
  SupervisorOptions options_;
  std::atomic<int> stop_{0};
  std::vector<std::string> observed_;
};

TEST_F(SupervisorTest, PrefixesObservesAndReaps) {
  Supervisor sup(&launcher_, out_, options_,
                 [this](const Supervisor::Child& c, const std::string& l) {
                   observed_.push_back(c.name() + "|" + l);
                 });
  auto w = sup.Start(Spec(TaskRole::kWorker, "worker 1"));
  ASSERT_TRUE(w.ok());
  FakeProcess* p = launcher_.started["worker 1"];
  p->pending = {"loading", "worker 1: step 3, ..."};
  sup.Pump(absl::ZeroDuration());
  EXPECT_EQ(out_.str(), "worker 1: loading\nworker 1: step 3, ...\n");
  EXPECT_THAT(observed_, ElementsAre("worker 1|loading",
                                     "worker 1|worker 1: step 3, ..."));
  EXPECT_TRUE(sup.ReapExited().empty());
  p->pending = {"DONE {}"};
  p->Exit(0);
  std::vector<Supervisor::Child*> exited = sup.ReapExited();
  ASSERT_EQ(exited.size(), 1u);
  EXPECT_EQ(exited[0], *w);
  EXPECT_TRUE((*w)->exit_handled);
  EXPECT_EQ(observed_.back(), "worker 1|DONE {}");  // Drained at the exit.
  EXPECT_TRUE(sup.ReapExited().empty());
}

TEST_F(SupervisorTest, FailStopsEveryoneAndShowsTheTail) {
  Supervisor sup(&launcher_, out_, options_, nullptr);
  ASSERT_TRUE(sup.Start(Spec(TaskRole::kServer, "ps 0")).ok());
  auto w = sup.Start(Spec(TaskRole::kWorker, "worker 0"));
  ASSERT_TRUE(w.ok());
  launcher_.started["ps 0"]->ignores_sigterm = true;
  FakeProcess* p = launcher_.started["worker 0"];
  p->pending = {"a", "b", "c"};
  p->Exit(3);
  ASSERT_EQ(sup.ReapExited().size(), 1u);
  absl::Status st = sup.Fail(**w, "exit code 3");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);  // Its exit code, 3.
  EXPECT_EQ(st.message(),
            "worker 0 failed (exit code 3); last lines:\n    b\n    c\n"
            "(full logs in /logs)");
  EXPECT_THAT(launcher_.started["ps 0"]->signals, ElementsAre(SIGTERM));
  EXPECT_TRUE(launcher_.started["ps 0"]->exited);  // SIGKILLed after grace.
  EXPECT_THAT(out_.str(), HasSubstr("launch: ps 0 did not stop within 50ms "
                                    "of SIGTERM; sending SIGKILL\n"));
}

TEST_F(SupervisorTest, StartFailureAndStopSignal) {
  Supervisor sup = Make();
  launcher_.fail_next = true;
  auto bad = sup.Start(Spec(TaskRole::kEval, "eval"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bad.status().message(), "cannot start eval: no such binary");
  launcher_.fail_next = false;
  ASSERT_TRUE(sup.Start(Spec(TaskRole::kServer, "ps 0")).ok());
  EXPECT_TRUE(sup.CheckStopSignal().ok());
  stop_.store(SIGINT);
  absl::Status st = sup.CheckStopSignal();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(st.message(), "interrupted by signal 2");
  EXPECT_THAT(out_.str(),
              HasSubstr("launch: got signal 2; stopping the workers, then "
                        "the servers\n"));
  EXPECT_TRUE(launcher_.started["ps 0"]->exited);
}

TEST_F(SupervisorTest, StopsWorkersAndEvaluationsBeforeServers) {
  Supervisor sup = Make();
  ASSERT_TRUE(sup.Start(Spec(TaskRole::kServer, "ps 0")).ok());
  ASSERT_TRUE(sup.Start(Spec(TaskRole::kWorker, "worker 0")).ok());
  ASSERT_TRUE(sup.Start(Spec(TaskRole::kCurveEval, "curve eval")).ok());
  // A worker slow to stop holds the servers back until it is gone.
  launcher_.started["worker 0"]->ignores_sigterm = true;
  sup.StopAll();
  EXPECT_THAT(launcher_.signal_order,
              ElementsAre(absl::StrCat("worker 0 ", SIGTERM),
                          absl::StrCat("curve eval ", SIGTERM),
                          absl::StrCat("worker 0 ", SIGKILL),
                          absl::StrCat("ps 0 ", SIGTERM)));
}

TEST(StatusCodeForExitTest, PassesTheChildsExitCodeThrough) {
  EXPECT_EQ(StatusCodeForExit({2, 0}), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusCodeForExit({3, 0}), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForExit({1, 0}), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusCodeForExit({0, 0}), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusCodeForExit({-1, SIGKILL}), absl::StatusCode::kAborted);
}

TEST(LocalProcessLauncherTest, RunsLocallyOnly) {
  std::unique_ptr<ProcessLauncher> launcher = NewLocalProcessLauncher();
  TaskSpec t = Spec(TaskRole::kWorker, "worker 0");
  t.argv = {"/bin/sh", "-c", "echo hi"};
  auto p = launcher->Start(t);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> lines;
  // A generous bound: on a loaded 2-core machine a fork+exec of sh can take
  // seconds, and terminating it early would lose its line.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!(*p)->CheckExited() && absl::Now() < deadline) {
    launcher->WaitForOutput({p->get()}, absl::Milliseconds(50));
    (*p)->ReadAvailable(&lines);
  }
  (*p)->Terminate(absl::Seconds(1), &lines);
  EXPECT_THAT(lines, ElementsAre("hi"));
  EXPECT_TRUE((*p)->exit_status().success());
  t.host = "198.18.0.9";  // Any other host: not started, never contacted.
  EXPECT_EQ(launcher->Start(t).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace downpour
