// Graceful stop of a worker. A real ps_worker training
// against a real ps_server gets SIGTERM mid-run; it must finish the step under
// way, push it, leave, print its DONE line and exit 0 within a few seconds,
// and the server must have applied every step it reports (nothing dropped).
#include <signal.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/report.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

TEST(WorkerStopTest, SigtermFinishesTheStepPushesLeavesAndExitsZero) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install "
                    "dataset-fashion-mnist)";
  }
  TestClusterOptions co;
  co.server_flags = {"--num_workers=1"};
  auto cluster = TestCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string hosts = absl::StrCat("--ps_hosts=", (*cluster)->hosts()[0]);
  // Far more steps than the test waits for: only SIGTERM ends this worker.
  auto worker = StartChild({"worker/ps_worker", hosts, "--worker_index=0",
                       "--num_workers=1", "--max_train_examples=4000",
                       "--epochs=100", "--log_every=5"});
  ASSERT_TRUE(worker);
  std::vector<std::string> lines;
  ASSERT_TRUE(WaitForWorkerStep(worker.get(), 15, absl::Seconds(40), &lines));
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(worker->Signal(SIGTERM).ok());
  ASSERT_TRUE(worker->WaitFor(absl::Seconds(10), &lines))
      << "ps_worker did not stop within 10 s of SIGTERM";
  const absl::Duration took = absl::Now() - sent;
  EXPECT_LT(took, absl::Seconds(5)) << "graceful stop took " << took;
  EXPECT_TRUE(worker->exit_status().success())
      << worker->exit_status().ToString() << "\n" << absl::StrJoin(lines, "\n");
  std::optional<DoneReport> done;
  bool said = false;
  for (const std::string& l : lines) {
    if (auto d = ParseDoneLine(l)) done = d;
    said |= absl::StrContains(l, "stopped by signal after its last step");
  }
  ASSERT_TRUE(done.has_value()) << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(said) << absl::StrJoin(lines, "\n");
  EXPECT_GE(done->steps, 15);
  EXPECT_LT(done->steps, 4000 / 64 * 100) << "it did not stop early";

  // Every step the worker reports was pushed and applied (n_push = 1).
  EvalOutput eval;
  ASSERT_TRUE(RunEval(hosts, 500, absl::Seconds(60), &eval));
  const std::optional<JsonNumbers>& stats = eval.server_stats;
  ASSERT_TRUE(stats.has_value()) << absl::StrJoin(eval.lines, "\n");
  EXPECT_EQ(stats->at("pushes_applied"), done->steps)
      << absl::StrJoin(eval.lines, "\n");
  EXPECT_TRUE((*cluster)->AllRunning());
}

}  // namespace
}  // namespace downpour
