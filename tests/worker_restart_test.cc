// A worker restarted with the same index is a new
// process, not a retry. One real ps_server; ps_worker --worker_index=0 runs
// 100 steps, then the same command runs 60 more, then an eval reads the
// server's stats: all 160 pushes must be applied and none counted as a
// duplicate, in async, sync and ssp mode.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/report.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

// Runs ps_worker with `flags`; returns its output lines, failing the test
// when it does not exit 0 within a minute.
std::vector<std::string> RunWorker(std::vector<std::string> flags) {
  SubprocessOptions o;
  o.argv = {"worker/ps_worker"};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  o.tail_lines = 30;
  std::vector<std::string> lines;
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return lines;
  EXPECT_TRUE((*p)->WaitFor(absl::Minutes(1), &lines)) << "ps_worker hung";
  if (!(*p)->exited()) (*p)->Terminate(absl::Seconds(5));
  EXPECT_TRUE((*p)->exit_status().success())
      << (*p)->exit_status().ToString() << "\n" << absl::StrJoin(lines, "\n");
  return lines;
}

class WorkerRestartTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WorkerRestartTest, RestartedWorkerPushesAreAllApplied) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const std::string mode = GetParam();
  TestClusterOptions co;
  co.server_flags = {absl::StrCat("--mode=", mode), "--num_workers=1"};
  auto cluster = TestCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string hosts = absl::StrCat("--ps_hosts=", (*cluster)->hosts()[0]);
  const std::vector<std::string> train = {
      hosts, "--worker_index=0", "--num_workers=1",
      absl::StrCat("--mode=", mode), "--max_train_examples=8000",
      "--log_every=1000"};
  std::vector<std::string> first = train, second = train;
  first.push_back("--max_steps=100");
  second.push_back("--max_steps=60");
  RunWorker(first);
  RunWorker(second);
  std::vector<std::string> eval =
      RunWorker({hosts, "--task=eval", "--max_test_examples=500"});
  std::optional<JsonNumbers> stats;
  for (const std::string& l : eval) {
    if (auto s = ParseServerStatsLine(l)) stats = s;
  }
  ASSERT_TRUE(stats.has_value()) << absl::StrJoin(eval, "\n");
  EXPECT_EQ(stats->at("pushes_applied"), 160) << absl::StrJoin(eval, "\n");
  EXPECT_EQ(stats->at("pushes_duplicate"), 0);
  EXPECT_TRUE((*cluster)->AllRunning());
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkerRestartTest,
                         ::testing::Values("async", "sync", "ssp"));

}  // namespace
}  // namespace downpour
