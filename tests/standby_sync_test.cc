// A sync job with a standby shard whose primary is SIGKILLed mid-run ends
// with saved parameters byte-identical to the same job undisturbed: the
// standby holds every gradient the primary took (each is applied there
// before the primary acknowledges it), and the step's mean is summed in
// worker order, so the step in progress at the kill is completed on the
// standby exactly as the primary would have. Real processes: one shard
// (primary and standby ps_server tasks) and two ps_worker tasks from one
// cluster spec, fixed seed, 1 epoch over 2,560 Fashion-MNIST examples.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "tests/standby_cluster.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

// The job's flags, for servers and workers alike; the workers add the seed.
const std::vector<std::string>& JobFlags() {
  static const auto* flags = new std::vector<std::string>{
      "--mode=sync", "--epochs=1", "--max_train_examples=2560"};
  return *flags;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs the job; with `kill_at_step` > 0 the primary is SIGKILLed once
// worker 0 reports that step. Returns the saved parameters' bytes.
std::string RunJob(const std::string& name, int kill_at_step) {
  const StandbyJob job = StandbyJob::Make(1, 2);
  auto primary = StartSpecServer(job, "ps", 0, JobFlags());
  auto standby = StartSpecServer(job, "ps_standby", 0, JobFlags());
  if (!primary || !standby) return "";
  std::vector<std::string> standby_log;
  EXPECT_TRUE(WaitForText(standby.get(), "caught up", absl::Seconds(20),
                          &standby_log))
      << absl::StrJoin(standby_log, "\n");
  const std::string saved = TestTmpPath(absl::StrCat(name, ".safetensors"));
  std::remove(saved.c_str());
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> argv = {"worker/ps_worker"};
    for (const std::string& f : job.SpecFlags("worker", w)) argv.push_back(f);
    for (const std::string& f : JobFlags()) argv.push_back(f);
    argv.push_back("--seed=7");
    argv.push_back("--log_every=2");
    argv.push_back("--max_test_examples=200");
    if (w == 0) argv.push_back(absl::StrCat("--save_params=", saved));
    workers.push_back(StartChild(argv));
    if (!workers.back()) return "";
  }
  std::vector<std::string> seen;
  if (kill_at_step > 0) {
    EXPECT_TRUE(WaitForWorkerStep(workers[0].get(), kill_at_step,
                                  absl::Seconds(60), &seen));
    EXPECT_TRUE(primary->Signal(SIGKILL).ok());
    EXPECT_TRUE(WaitForText(standby.get(), "promoted to primary",
                            absl::Seconds(10), &standby_log))
        << absl::StrJoin(standby_log, "\n");
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    std::vector<std::string> lines = i == 0 ? seen : std::vector<std::string>();
    EXPECT_TRUE(workers[i]->WaitFor(absl::Seconds(120), &lines))
        << "worker " << i << " hung";
    if (!workers[i]->exited()) workers[i]->Terminate(absl::Seconds(5));
    EXPECT_TRUE(workers[i]->exit_status().success())
        << name << " worker " << i << ": "
        << workers[i]->exit_status().ToString() << "\n"
        << absl::StrJoin(lines, "\n");
    if (kill_at_step > 0) {
      bool logged = false;
      for (const std::string& l : lines) {
        logged = logged || l.find("failed over to " + job.standby[0]) !=
                               std::string::npos;
      }
      EXPECT_TRUE(logged) << "worker " << i << " logged no failover:\n"
                          << absl::StrJoin(lines, "\n");
    }
  }
  // The job is over: the serving process exits 0 by itself.
  EXPECT_TRUE(standby->WaitFor(absl::Seconds(30), &standby_log))
      << absl::StrJoin(standby_log, "\n");
  return ReadFile(saved);
}

TEST(StandbySyncTest, KilledPrimaryEndsByteIdenticalToUndisturbed) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install "
                    "dataset-fashion-mnist)";
  }
  const std::string undisturbed = RunJob("undisturbed", 0);
  const std::string killed = RunJob("killed", 8);
  ASSERT_FALSE(undisturbed.empty());
  ASSERT_FALSE(killed.empty());
  std::printf("saved parameters: %zu bytes undisturbed, %zu with the primary "
              "killed\n", undisturbed.size(), killed.size());
  EXPECT_TRUE(undisturbed == killed)
      << "saved parameters differ (" << undisturbed.size() << " and "
      << killed.size() << " bytes)";
}

}  // namespace
}  // namespace downpour
