// End to end through the real launcher: 2 ps_server + 2 ps_worker processes
// on loopback train the Fashion-MNIST CNN asynchronously on a subset of the
// real data set, then the launcher evaluates the servers' parameters and
// saves them. The saved file must hold the model and reproduce the reported
// accuracy when evaluated independently.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/safetensors.h"
#include "common/test_files.h"
#include "common/report.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"
#include "worker/trainer.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

struct LaunchRun {
  ExitStatus exit;
  std::vector<std::string> lines;
};

LaunchRun RunLaunch(std::vector<std::string> flags) {
  SubprocessOptions o;
  o.argv = {"deploy/launch"};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  o.tail_lines = 40;
  auto p = Subprocess::Start(o);
  LaunchRun run;
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return run;
  EXPECT_TRUE((*p)->WaitFor(absl::Minutes(4), &run.lines)) << "launch hung";
  if (!(*p)->exited()) (*p)->Terminate(absl::Seconds(5));
  run.exit = (*p)->exit_status();
  return run;
}

TEST(ClusterTrainTest, TwoServersTwoWorkersLearnFashionMnistSubset) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const std::string params = TestTmpDir() + "/model.safetensors";
  LaunchRun run = RunLaunch(
      {"--servers=2", "--workers=2", "--mode=async", "--epochs=2",
       "--max_train_examples=12000", "--batch_size=64", "--optimizer=adagrad",
       "--lr=0.05", "--seed=3", absl::StrCat("--save_params=", params),
       absl::StrCat("--log_dir=", TestTmpDir(), "/logs")});
  std::string out;
  for (const std::string& l : run.lines) absl::StrAppend(&out, l, "\n");
  ASSERT_TRUE(run.exit.success()) << run.exit.ToString() << "\n" << out;

  std::optional<JsonNumbers> summary;
  bool saw_progress = false;
  for (const std::string& l : run.lines) {
    if (auto s = ParseTaggedJson(l, "SUMMARY")) summary = s;
    if (absl::StartsWith(l, "worker 1: step ") &&
        absl::StrContains(l, "examples/sec") && absl::StrContains(l, "[data ")) {
      saw_progress = true;
    }
  }
  EXPECT_TRUE(saw_progress) << out;
  ASSERT_TRUE(summary.has_value()) << out;
  // 12000 examples over 2 workers, 2 epochs, batch 64: 94 steps per worker
  // per epoch (the last batch of 6000 is partial).
  EXPECT_EQ(summary->at("examples"), 24000);
  EXPECT_EQ(summary->at("steps"), 2 * 2 * 94);
  // The stated accuracy band for this subset run.
  EXPECT_GE(summary->at("test_accuracy"), 0.78) << out;
  EXPECT_LT(summary->at("final_loss"), 0.8);
  EXPECT_LT(summary->at("test_loss"), 0.8);
  EXPECT_GT(summary->at("examples_per_sec"), 0);

  // The saved parameters are the model, and evaluating them here gives the
  // accuracy the cluster reported.
  auto file = ReadSafetensors(params);
  ASSERT_TRUE(file.ok()) << file.status();
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 500);
  ASSERT_TRUE(model.ok());
  ASSERT_EQ(file->tensors, (*model)->param_specs());
  ASSERT_TRUE((*model)->SetParameters(file->flat).ok());
  auto test = LoadMnistSplit(kData, false);
  ASSERT_TRUE(test.ok());
  auto eval = EvaluateModel(model->get(), *test);
  ASSERT_TRUE(eval.ok());
  EXPECT_NEAR(eval->accuracy, summary->at("test_accuracy"), 1e-4);
}

// The single-host multi-replica mode on CPU replicas (GPU replicas take the
// same path with --gpus): two replicas in one worker process sum their
// gradients and push once; the model saves as from any other mode.
TEST(ClusterTrainTest, TwoReplicasInOneWorkerAggregateLocallyAndSave) {
  if (!std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const std::string params = TestTmpDir() + "/replicas.safetensors";
  LaunchRun run = RunLaunch(
      {"--servers=1", "--workers=1", "--replicas=2", "--device=cpu",
       "--mode=async", "--epochs=1", "--max_train_examples=12000",
       "--batch_size=64", "--seed=5", "--eval_examples=2000",
       // One worker without overlap is deterministic, so the band is fixed.
       "--worker_args=--overlap=false",
       absl::StrCat("--save_params=", params)});
  std::string out;
  for (const std::string& l : run.lines) absl::StrAppend(&out, l, "\n");
  ASSERT_TRUE(run.exit.success()) << run.exit.ToString() << "\n" << out;
  EXPECT_TRUE(absl::StrContains(out, "2 replicas (gradients summed here, one push)"))
      << out;
  std::optional<JsonNumbers> summary;
  for (const std::string& l : run.lines) {
    if (auto s = ParseTaggedJson(l, "SUMMARY")) summary = s;
  }
  ASSERT_TRUE(summary.has_value()) << out;
  // 6000 examples per replica: 94 batches, one push per pair of batches.
  EXPECT_EQ(summary->at("examples"), 12000);
  EXPECT_EQ(summary->at("steps"), 94);
  EXPECT_GE(summary->at("test_accuracy"), 0.70) << out;
  auto file = ReadSafetensors(params);
  ASSERT_TRUE(file.ok()) << file.status();
  auto backend = NewOpenblasBackend(1);
  auto model = BuildModel("fashion_cnn", backend.get(), 500);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(file->tensors, (*model)->param_specs());
}

TEST(ClusterTrainTest, FailingWorkerStopsTheClusterWithItsName) {
  LaunchRun run = RunLaunch({"--servers=1", "--workers=2", "--epochs=1",
                             "--worker_args=--model=no_such_model",
                             absl::StrCat("--log_dir=", TestTmpDir(), "/fail_logs")});
  std::string out;
  for (const std::string& l : run.lines) absl::StrAppend(&out, l, "\n");
  EXPECT_FALSE(run.exit.success()) << out;
  EXPECT_TRUE(absl::StrContains(out, "failed")) << out;
  EXPECT_TRUE(absl::StrContains(out, "worker ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "no_such_model")) << out;
}

}  // namespace
}  // namespace downpour
