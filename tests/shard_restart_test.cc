// Workers ride through a shard restart. Two real
// ps_server shards with snapshots and two real ps_worker processes train on
// Fashion-MNIST; mid-run shard 0 is SIGKILLed and started again on the same
// port from its own snapshot. Every worker must exit 0 (they retry the shard
// for up to --reconnect_timeout_s, then go on with the restored values:
// async treats base versions ahead of the restored ones as fresh, sync
// resumes at the workers' step) and an eval of the final parameters must be
// within the accuracy band of an undisturbed run. In async and sync mode.
// Each worker notices the restart (the shard's server incarnation in its
// replies changes) and says so exactly once.
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/report.h"
#include "common/test_files.h"
#include "deploy/fs.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

// Shard `shard` of 2 on `port` (0: a free one); *bound gets the port.
std::unique_ptr<Subprocess> StartShard(int shard, int port,
                                       const std::string& mode,
                                       const std::string& dir, int* bound) {
  const std::string port_file = TestTmpPath(absl::StrCat("port", shard));
  std::remove(port_file.c_str());
  auto p = StartChild({"server/ps_server", absl::StrCat("--port=", port),
                  absl::StrCat("--port_file=", port_file),
                  absl::StrCat("--shard_index=", shard), "--num_shards=2",
                  "--num_workers=2", absl::StrCat("--mode=", mode),
                  "--sync_timeout_s=20", absl::StrCat("--checkpoint_dir=", dir),
                  "--checkpoint_every_s=0.2"});
  if (p == nullptr) return nullptr;
  for (int i = 0; i < 400; ++i) {
    if (std::optional<int> got = ReadPortFile(port_file)) {
      *bound = *got;
      return p;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ADD_FAILURE() << "ps_server did not start";
  return nullptr;
}

// A mode and the exchange the workers use.
struct RestartCase {
  std::string mode;
  bool wait_free;
};

class ShardRestartTest : public ::testing::TestWithParam<RestartCase> {};

TEST_P(ShardRestartTest, WorkersRideThroughAKilledShard) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install "
                    "dataset-fashion-mnist)";
  }
  const std::string mode = GetParam().mode;
  const std::string wait_free =
      GetParam().wait_free ? "--wait_free" : "--nowait_free";
  const std::string dir =
      TestTmpPath(absl::StrCat("snap_", mode, GetParam().wait_free));
  std::filesystem::remove_all(dir);
  int p0 = 0, p1 = 0;
  auto s0 = StartShard(0, 0, mode, dir, &p0);
  auto s1 = StartShard(1, 0, mode, dir, &p1);
  ASSERT_TRUE(s0 && s1);
  const std::string hosts =
      absl::StrCat("--ps_hosts=127.0.0.1:", p0, ",127.0.0.1:", p1);
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(StartChild(
        {"worker/ps_worker", hosts, absl::StrCat("--worker_index=", w),
         "--num_workers=2", absl::StrCat("--mode=", mode),
         "--max_train_examples=8000", "--epochs=3", "--max_steps=100",
         "--log_every=10", "--reconnect_timeout_s=40", wait_free}));
    ASSERT_TRUE(workers.back());
  }
  // Kill shard 0 once worker 0 is well into training (and a snapshot or
  // two were written), then restart it on the same port.
  std::vector<std::string> seen;
  ASSERT_TRUE(
      WaitForWorkerStep(workers[0].get(), 20, absl::Seconds(40), &seen));
  // And only once shard 0 has a snapshot to restore (a fast exchange can
  // reach step 20 before the first --checkpoint_every_s).
  ASSERT_TRUE(s0->WaitForLine(
                    [](const std::string& l) {
                      return absl::StrContains(l, "written (step");
                    },
                    absl::Seconds(20), nullptr)
                  .ok());
  ASSERT_TRUE(s0->Signal(SIGKILL).ok());
  s0->WaitFor(absl::Seconds(5), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  int again = 0;
  s0 = StartShard(0, p0, mode, dir, &again);
  ASSERT_TRUE(s0);
  ASSERT_EQ(again, p0);
  std::vector<std::string> restart_log;
  auto restored = s0->WaitForLine(
      [](const std::string& l) {
        return absl::StrContains(l, "restored snapshot");
      },
      absl::Seconds(10), &restart_log);
  EXPECT_TRUE(restored.ok()) << absl::StrJoin(restart_log, "\n");
  for (size_t i = 0; i < workers.size(); ++i) {
    auto& w = workers[i];
    std::vector<std::string> lines = i == 0 ? seen : std::vector<std::string>();
    EXPECT_TRUE(w->WaitFor(absl::Seconds(60), &lines)) << "ps_worker hung";
    if (!w->exited()) w->Terminate(absl::Seconds(5));
    EXPECT_TRUE(w->exit_status().success())
        << w->exit_status().ToString() << "\n" << absl::StrJoin(w->tail(), "\n");
    // The worker noticed the restart (the server incarnation in the
    // replies changed) exactly once, and only shard 0's.
    int noticed = 0, other = 0;
    for (const std::string& l : lines) {
      if (absl::StrContains(l, "shard 0 restarted (incarnation ")) ++noticed;
      if (absl::StrContains(l, "shard 1 restarted")) ++other;
    }
    EXPECT_EQ(noticed, 1) << "worker " << i << ":\n" << absl::StrJoin(lines, "\n");
    EXPECT_EQ(other, 0) << "worker " << i;
  }
  EvalOutput eval;
  ASSERT_TRUE(RunEval(hosts, 2000, absl::Seconds(60), &eval));
  const std::optional<EvalReport>& r = eval.eval;
  ASSERT_TRUE(r.has_value()) << absl::StrJoin(eval.lines, "\n");
  // 60 steps of 2 workers ended at 0.65-0.80 with the restart on this
  // subset (2-core box), and async wait-free under ASan+UBSan at 0.55 (its
  // slower steps stay one exchange behind, staleness 2.4 against 0.8 for
  // the overlapped exchange); 100 steps leave the band's margin to all of
  // them. The kill comes at step 20, and the restart loses what shard 0
  // applied since its last snapshot (0.2 s apart, some 10 pushes); the band
  // is the undisturbed run's lower edge with a margin. Parameters left
  // unrefreshed or wrongly restored end far below it (0.10-0.30).
  std::printf("%s %s: test accuracy after a shard restart %.4f\n",
              mode.c_str(), wait_free.c_str(), r->test_accuracy);
  for (const std::string& l : eval.lines) {
    if (absl::StrContains(l, "SERVER_STATS")) std::printf("%s\n", l.c_str());
  }
  EXPECT_GE(r->test_accuracy, 0.60) << absl::StrJoin(eval.lines, "\n");
  s1->ReadAvailable(nullptr);
  EXPECT_FALSE(s1->exited()) << "shard 1 exited";
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ShardRestartTest,
    ::testing::Values(RestartCase{"async", false}, RestartCase{"sync", false},
                      RestartCase{"async", true}, RestartCase{"sync", true}),
    [](const ::testing::TestParamInfo<RestartCase>& info) {
      return absl::StrCat(info.param.mode,
                          info.param.wait_free ? "_wait_free" : "");
    });

}  // namespace
}  // namespace downpour
