// A restarted worker resumes its data position instead of beginning its
// epochs again. One real ps_server (async); a real ps_worker with
// --position_file and --max_steps=80 is SIGKILLed once past step 30 and the
// same command is run again: the new process says where it resumes (at
// least step 29: the killed one had logged step 30, whose push may not have
// been acknowledged yet), goes on to step 80 and removes the file at the
// end, and the two processes together pushed about 80 gradients (80, or 81
// when the kill fell after a push had landed but before the position
// recorded it: the position names only acknowledged pushes, so none is
// lost), not 80 plus the steps before the kill. A third run of the same
// command then starts from the beginning (the file is gone).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/report.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// The step of a "resuming at step K (...)" line, if `line` is one.
std::optional<int64_t> ResumedAt(const std::string& line) {
  const std::string kTag = "resuming at step ";
  const size_t at = line.find(kTag);
  if (at == std::string::npos) return std::nullopt;
  const size_t start = at + kTag.size();
  const size_t end = line.find(' ', start);
  int64_t step = 0;
  if (!absl::SimpleAtoi(line.substr(start, end - start), &step)) {
    return std::nullopt;
  }
  return step;
}

TEST(WorkerResumeTest, RestartedWorkerResumesItsDataPosition) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install "
                    "dataset-fashion-mnist)";
  }
  TestClusterOptions co;
  co.server_flags = {"--mode=async", "--num_workers=1"};
  auto cluster = TestCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string hosts = absl::StrCat("--ps_hosts=", (*cluster)->hosts()[0]);
  const std::string position = TmpPath("ckpt/worker0.position");
  std::filesystem::remove_all(TmpPath("ckpt"));
  const std::vector<std::string> train = {
      "worker/ps_worker", hosts, "--worker_index=0", "--num_workers=1",
      "--mode=async", "--max_train_examples=8000", "--epochs=3",
      "--max_steps=80", "--log_every=10",
      absl::StrCat("--position_file=", position)};

  auto first = StartChild(train);
  ASSERT_TRUE(first);
  std::vector<std::string> seen;
  ASSERT_TRUE(WaitForWorkerStep(first.get(), 30, absl::Seconds(60), &seen));
  ASSERT_TRUE(first->Signal(SIGKILL).ok());
  first->WaitFor(absl::Seconds(5), nullptr);
  ASSERT_TRUE(std::ifstream(position).good()) << "no position written";

  auto second = StartChild(train);
  ASSERT_TRUE(second);
  std::vector<std::string> lines;
  EXPECT_TRUE(second->WaitFor(absl::Seconds(60), &lines)) << "ps_worker hung";
  ASSERT_TRUE(second->exit_status().success())
      << second->exit_status().ToString() << "\n" << absl::StrJoin(lines, "\n");
  std::optional<int64_t> resumed;
  std::optional<DoneReport> done;
  int64_t first_progress = -1;
  for (const std::string& l : lines) {
    if (auto r = ResumedAt(l)) resumed = r;
    if (auto d = ParseDoneLine(l)) done = d;
    auto p = ParseProgressLine(l);
    if (p.has_value() && first_progress < 0) first_progress = p->step;
  }
  const std::string all = absl::StrJoin(lines, "\n");
  ASSERT_TRUE(resumed.has_value()) << all;
  EXPECT_GE(*resumed, 29) << all;
  EXPECT_LT(*resumed, 80) << all;
  EXPECT_GT(first_progress, *resumed) << all;  // Step numbers go on.
  ASSERT_TRUE(done.has_value()) << all;
  EXPECT_EQ(done->steps, 80) << all;
  EXPECT_EQ(done->pushes, 80 - *resumed) << all;
  EXPECT_FALSE(std::ifstream(position).good()) << "position kept after the end";

  EvalOutput eval;
  ASSERT_TRUE(RunEval(hosts, 500, absl::Seconds(60), &eval));
  const std::optional<JsonNumbers>& stats = eval.server_stats;
  ASSERT_TRUE(stats.has_value()) << absl::StrJoin(eval.lines, "\n");
  std::printf("killed past step 30; resumed at step %lld; pushes applied "
              "by both processes: %.0f\n",
              static_cast<long long>(*resumed), stats->at("pushes_applied"));
  // Without the position the second process would push 80 more.
  EXPECT_GE(stats->at("pushes_applied"), 80);
  EXPECT_LE(stats->at("pushes_applied"), 81);

  // The job's end removed the position: the same command starts afresh.
  auto third = StartChild(train);
  ASSERT_TRUE(third);
  std::vector<std::string> third_lines;
  EXPECT_TRUE(third->WaitFor(absl::Seconds(60), &third_lines));
  EXPECT_TRUE(third->exit_status().success());
  for (const std::string& l : third_lines) {
    EXPECT_FALSE(ResumedAt(l).has_value()) << l;
  }
  EXPECT_TRUE((*cluster)->AllRunning());
}

}  // namespace
}  // namespace downpour
