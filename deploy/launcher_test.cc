// Runs RunCluster against shell-script stand-ins for ps_server and ps_worker
// that follow the child protocol described in deploy/launcher.h.
#include "deploy/launcher.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/test_files.h"
#include "common/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// @DIR@ is replaced by the test's scratch directory; @FAIL@ by the index of a
// worker that should fail (or -1).
constexpr char kFakeServer[] = R"(#!/bin/sh
port_file=""; shard=0
for a in "$@"; do
  case "$a" in
    --port_file=*) port_file="${a#--port_file=}" ;;
    --shard_index=*) shard="${a#--shard_index=}" ;;
  esac
done
echo "$*" > "@DIR@/server_$shard.args"
echo $$ > "@DIR@/server_$shard.pid"
trap 'echo "shutting down"; exit 0' TERM INT
@SERVER_HOOK@
port=$((7000 + shard))
echo $port > "$port_file.tmp" && mv "$port_file.tmp" "$port_file"
echo "serving on $port"
while :; do sleep 0.05; done
)";

constexpr char kFakeWorker[] = R"(#!/bin/sh
idx=0; task=train
for a in "$@"; do
  case "$a" in
    --worker_index=*) idx="${a#--worker_index=}" ;;
    --task=*) task="${a#--task=}" ;;
  esac
done
case "$task $*" in
  "eval "*--max_test_examples=*)
    # A curve evaluation: run n (0, 1, ...) reports 0.80, fails, 0.86, 0.89...
    echo "$*" > "@DIR@/curve_eval.args"
    [ -e "@DIR@/curve_eval.running" ] && echo overlap >> "@DIR@/curve_eval.overlap"
    touch "@DIR@/curve_eval.running"
    n=$(cat "@DIR@/curve_eval.n" 2>/dev/null || echo 0)
    echo $((n + 1)) > "@DIR@/curve_eval.n"
    @CURVE_HOOK@
    rm -f "@DIR@/curve_eval.running"
    case $n in
      0) acc=0.80 ;;
      1) echo "curve eval $n: cannot connect" >&2; exit 4 ;;
      2) acc=0.86 ;;
      *) acc=0.89 ;;
    esac
    echo "EVAL {\"test_accuracy\":$acc,\"test_loss\":0.5,\"examples\":500}"
    exit 0 ;;
  "eval "*)
    echo "$*" > "@DIR@/eval.args"
    echo "evaluating"
    echo 'EVAL {"test_accuracy":0.875,"test_loss":0.33,"examples":10000}'
    echo 'SERVER_STATS {"shard":0,"staleness_mean":1.0,"staleness_max":3,"staleness_p50":1,"staleness_p99":3,"dropped_stale":4,"pushes_applied":100,"extra":{"a":[1]}}'
    echo 'SERVER_STATS {"shard":1,"staleness_mean":2.0,"staleness_max":5,"staleness_p50":2,"staleness_p99":4,"dropped_stale":6,"pushes_applied":300}'
    exit 0 ;;
esac
echo "$*" > "@DIR@/worker_$idx.args"
echo "worker $idx: loading data"
echo "worker $idx: step 10, loss = 0.5 (1000.0 examples/sec; 0.064 sec/batch) [data 1% compute 80% pull 10% push 9%]"
if [ "$idx" = "@FAIL@" ]; then
  i=0
  while [ $i -lt 30 ]; do echo "noise line $i"; i=$((i+1)); done
  echo "boom: something broke" >&2
  exit 3
fi
@WORKER_HOOK@
sleep 0.4
echo "worker $idx: step 20, loss = 0.4 (1500.5 examples/sec; 0.040 sec/batch) [data 1% compute 80% pull 10% push 9%]"
echo "DONE {\"worker\":$idx,\"steps\":$((100+idx)),\"examples\":6400,\"final_loss\":0.$((3+idx)),\"seconds\":1.5}"
)";

void WriteExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class LauncherTest : public ::testing::Test {
 protected:
  // Writes the fake binaries into a fresh directory and fills options_.
  void Setup(int fail_worker, const std::string& server_hook = "",
             const std::string& worker_hook = "",
             const std::string& curve_hook = "") {
    dir_ = absl::StrCat(TestTmpDir(), "/",
                        ::testing::UnitTest::GetInstance()
                            ->current_test_info()
                            ->name());
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
    auto fill = [&](const char* tmpl) {
      return absl::StrReplaceAll(tmpl, {{"@DIR@", dir_},
                                        {"@FAIL@", absl::StrCat(fail_worker)},
                                        {"@SERVER_HOOK@", server_hook},
                                        {"@WORKER_HOOK@", worker_hook},
                                        {"@CURVE_HOOK@", curve_hook}});
    };
    options_.ps_server_bin = dir_ + "/ps_server";
    options_.ps_worker_bin = dir_ + "/ps_worker";
    WriteExecutable(options_.ps_server_bin, fill(kFakeServer));
    WriteExecutable(options_.ps_worker_bin, fill(kFakeWorker));
    options_.servers = 2;
    options_.workers = 2;
    options_.epochs = 2;
    options_.batch_size = 32;
    options_.lr = 0.05;
    options_.optimizer = "sgd";
    options_.seed = 7;
    options_.data_dir = dir_;
    options_.log_dir = dir_ + "/logs";
    options_.startup_timeout = absl::Seconds(20);
    options_.stop_grace = absl::Seconds(2);
    options_.rate_report_interval = absl::Milliseconds(100);
    ASSERT_TRUE(ValidateLaunchOptions(options_).ok());
  }

  void ExpectServersGone() {
    for (int k = 0; k < options_.servers; ++k) {
      int pid = 0;
      std::string text = ReadBytes(absl::StrCat(dir_, "/server_", k, ".pid"));
      ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid))
          << "server " << k << " pid file: '" << text << "'";
      EXPECT_FALSE(ProcessExists(pid)) << "server " << k << " still running";
    }
  }

  std::string dir_;
  LaunchOptions options_;
};

TEST_F(LauncherTest, SuccessfulRun) {
  Setup(/*fail_worker=*/-1);
  options_.summary_json = dir_ + "/summary.json";
  options_.save_params = dir_ + "/params.safetensors";
  options_.max_train_examples = 640;
  options_.server_args = {"--extra_server=1"};
  options_.worker_args = {"--extra_worker=2"};
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  const std::string text = out.str();
  ASSERT_TRUE(s.ok()) << s.status() << "\n" << text;

  EXPECT_EQ(s->steps, 201);
  EXPECT_EQ(s->examples, 12800);
  EXPECT_DOUBLE_EQ(s->final_loss, 0.35);
  EXPECT_DOUBLE_EQ(s->test_accuracy, 0.875);
  EXPECT_DOUBLE_EQ(s->test_loss, 0.33);
  ASSERT_TRUE(s->staleness_mean.has_value());
  EXPECT_DOUBLE_EQ(*s->staleness_mean, (1.0 * 100 + 2.0 * 300) / 400);
  EXPECT_DOUBLE_EQ(s->staleness_max.value_or(0), 5);
  EXPECT_DOUBLE_EQ(s->staleness_p50.value_or(0), (1.0 * 100 + 2.0 * 300) / 400);
  EXPECT_DOUBLE_EQ(s->staleness_p99.value_or(0), 4);
  EXPECT_EQ(s->dropped_stale.value_or(0), 10);
  // Without --eval_every_s the final evaluation is the only curve point.
  ASSERT_EQ(s->curve.size(), 1u);
  EXPECT_DOUBLE_EQ(s->curve[0].seconds, s->training_seconds);
  EXPECT_DOUBLE_EQ(s->curve[0].test_accuracy, 0.875);
  // No curve sampled during training: no time to an accuracy.
  EXPECT_FALSE(s->time_to_85.has_value());
  EXPECT_FALSE(s->time_to_88.has_value());
  EXPECT_GT(s->training_seconds, 0.3);
  EXPECT_GE(s->wall_seconds, s->training_seconds);
  EXPECT_NEAR(s->examples_per_sec, 12800 / s->training_seconds, 1e-6);
  EXPECT_EQ(s->mode, "async");
  EXPECT_EQ(s->optimizer, "sgd");

  // Output contract.
  EXPECT_THAT(text, HasSubstr("launch: server 0 listening on 127.0.0.1:7000\n"));
  EXPECT_THAT(text, HasSubstr("launch: server 1 listening on 127.0.0.1:7001\n"));
  EXPECT_THAT(text, HasSubstr("ps 1: serving on 7001\n"));
  EXPECT_THAT(text, HasSubstr("\nworker 0: step 10, loss = 0.5 (1000.0 "));
  EXPECT_THAT(text, HasSubstr("\nworker 1: loading data\n"));
  EXPECT_THAT(text, Not(HasSubstr("worker 1: worker 1")));
  EXPECT_THAT(text, HasSubstr("worker 1: DONE {"));
  EXPECT_THAT(text, HasSubstr("cluster: "));
  EXPECT_THAT(text, HasSubstr(" examples/sec (2 workers, step "));
  EXPECT_THAT(text, HasSubstr("eval: EVAL {"));
  EXPECT_THAT(text, HasSubstr("ps 0: shutting down\n"));
  const std::string json = s->ToJson();
  EXPECT_THAT(text, HasSubstr("\nSUMMARY " + json + "\n"));
  EXPECT_EQ(text.substr(text.rfind('\n', text.size() - 2) + 1),
            "SUMMARY " + json + "\n");
  EXPECT_EQ(ReadBytes(options_.summary_json), json + "\n");
  EXPECT_THAT(json, HasSubstr("\"steps\":201,\"examples\":12800,"));
  EXPECT_THAT(json, HasSubstr("\"staleness_mean\":1.75,\"staleness_max\":5,"
                              "\"staleness_p50\":1.75,\"staleness_p99\":4,"
                              "\"dropped_stale\":10,"));
  EXPECT_THAT(json, Not(HasSubstr("time_to_")));
  EXPECT_THAT(text, HasSubstr("\ncurve: t="));
  EXPECT_THAT(text, Not(HasSubstr("curve eval")));
  EXPECT_THAT(json, HasSubstr("\"lr\":0.05"));

  // Child command lines.
  EXPECT_EQ(ReadBytes(dir_ + "/server_1.args"),
            absl::StrCat("--port=0 --port_file=", options_.log_dir,
                         "/ps_1.port --shard_index=1 --num_shards=2 "
                         "--optimizer=sgd --lr=0.05 --mode=async "
                         "--num_workers=2 --replicas_to_aggregate=0 "
                         "--staleness=2 --staleness_aware=false "
                         "--drop_stale_threshold=0 --sync_timeout_s=30 "
                         "--min_replicas=1 --epochs=2 --batch_size=32 "
                         "--n_push=1 --data_dir=", dir_, " --replicas=1 "
                         "--gpus= --local_aggregation=sum "
                         "--max_train_examples=640 --lr_schedule=auto "
                         "--checkpoint_dir=", options_.log_dir,
                         "/ckpt/shard1 --checkpoint_every_s=2 "
                         "--extra_server=1\n"));
  EXPECT_EQ(ReadBytes(dir_ + "/worker_1.args"),
            absl::StrCat("--ps_hosts=127.0.0.1:7000,127.0.0.1:7001 "
                         "--worker_index=1 --num_workers=2 --task=train "
                         "--mode=async --epochs=2 --batch_size=32 --seed=7 --data_dir=",
                         dir_,
                         " --n_fetch=1 --n_push=1 --device=auto --gpus= "
                         "--replicas=1 --local_aggregation=sum "
                         "--label_smoothing=0 --augment=flip "
                         "--max_train_examples=640 --position_file=",
                         options_.log_dir,
                         "/ckpt/worker1.position --extra_worker=2\n"));
  EXPECT_EQ(ReadBytes(dir_ + "/eval.args"),
            absl::StrCat("--task=eval --mode=async "
                         "--ps_hosts=127.0.0.1:7000,127.0.0.1:7001"
                         " --data_dir=", dir_, " --save_params=",
                         options_.save_params, " --extra_worker=2\n"));
  // Per-child logs hold the raw output.
  EXPECT_THAT(ReadBytes(options_.log_dir + "/worker_0.log"),
              HasSubstr("worker 0: step 20, loss = 0.4"));
  EXPECT_THAT(ReadBytes(options_.log_dir + "/ps_0.log"),
              HasSubstr("serving on 7000\n"));
  ExpectServersGone();
}

// The final evaluation evaluates but cannot save: the parameters go into the
// log folder, SUMMARY says so, and the run ends with FailedPrecondition
// (exit code 2) naming both paths.
TEST_F(LauncherTest, SaveThatFailsAtTheEndGoesIntoTheLogFolder) {
  Setup(-1);
  WriteExecutable(
      options_.ps_worker_bin,
      absl::StrReplaceAll(
          ReadBytes(options_.ps_worker_bin),
          {{"    exit 0 ;;\nesac",
            absl::StrCat("    case \"$*\" in *--save_params=", dir_,
                         "/out/*) echo 'error: cannot write: Read-only file "
                         "system' >&2; exit 2 ;; esac\n    exit 0 ;;\nesac")}}));
  options_.save_params = dir_ + "/out/params.safetensors";
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_FALSE(s.ok()) << out.str();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string fallback = options_.log_dir + "/params.safetensors";
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("cannot write --save_params=" + options_.save_params +
                        " (error: cannot write: Read-only file system); the "
                        "parameters are in " + fallback + " instead"));
  EXPECT_THAT(out.str(), HasSubstr("\"saved_params\":\"" + fallback + "\""));
  EXPECT_THAT(ReadBytes(dir_ + "/curve_eval.args"),
              HasSubstr("--save_params=" + fallback));
  ExpectServersGone();
}

TEST_F(LauncherTest, FailingWorkerStopsEverything) {
  // Worker 0 would run for a minute; it must be stopped, not waited for.
  Setup(/*fail_worker=*/1, "", "sleep 60");
  std::ostringstream out;
  const absl::Time start = absl::Now();
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  const std::string msg(s.status().message());
  EXPECT_THAT(msg, HasSubstr("worker 1 failed (exit code 3); last lines:\n"));
  EXPECT_THAT(msg, HasSubstr("\n    boom: something broke"));
  EXPECT_THAT(msg, HasSubstr("\n    noise line 29"));
  EXPECT_THAT(msg, Not(HasSubstr("noise line 5\n")));  // Only the tail.
  EXPECT_THAT(out.str(), HasSubstr("ps 0: shutting down"));
  EXPECT_THAT(out.str(), HasSubstr("ps 1: shutting down"));
  EXPECT_THAT(out.str(), Not(HasSubstr("SUMMARY")));
  ExpectServersGone();
}

TEST_F(LauncherTest, ServerExitDuringTrainingFails) {
  // Shard 1 serves briefly, then exits 0 while the workers still run.
  Setup(-1, "", "sleep 3");
  WriteExecutable(options_.ps_server_bin,
                  absl::StrReplaceAll(ReadBytes(options_.ps_server_bin),
                                      {{"while :; do sleep 0.05; done",
                                        "[ $shard = 1 ] && { sleep 0.5; echo "
                                        "bye; exit 0; }\n"
                                        "while :; do sleep 0.05; done"}}));
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("ps 1 failed (exit code 0, while workers were "
                        "running); last lines:\n    serving on 7001\n    bye"));
  ExpectServersGone();
}

TEST_F(LauncherTest, StartupTimeoutNamesServer) {
  Setup(-1, "[ $shard = 1 ] && { echo 'stuck'; while :; do sleep 0.05; done; }");
  options_.startup_timeout = absl::Milliseconds(700);
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_THAT(msg, HasSubstr("ps 1 failed (no port file "));
  EXPECT_THAT(msg, HasSubstr("last lines:\n    stuck"));
  EXPECT_THAT(out.str(), HasSubstr("launch: server 0 listening"));
  ExpectServersGone();
}

TEST_F(LauncherTest, WorkerWithoutDoneLineFails) {
  Setup(-1, "", "exit 0");
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("no DONE line was printed"));
}

TEST_F(LauncherTest, StopSignalCancelsRun) {
  Setup(-1, "", "sleep 60");
  std::atomic<int> stop{0};
  std::thread stopper([&stop] {
    absl::SleepFor(absl::Milliseconds(800));
    stop.store(SIGINT);
  });
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, &stop);
  stopper.join();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("signal 2"));
  ExpectServersGone();
}

TEST_F(LauncherTest, SyncFlagsReachEveryChild) {
  Setup(-1);
  options_.mode = TrainMode::kSync;
  options_.replicas_to_aggregate = 1;
  options_.staleness = 0;
  options_.drop_stale_threshold = 5;
  options_.sync_timeout_s = 2.5;
  options_.min_replicas = 2;
  ASSERT_TRUE(ValidateLaunchOptions(options_).ok());
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_TRUE(s.ok()) << s.status() << "\n" << out.str();
  EXPECT_EQ(s->mode, "sync");
  EXPECT_THAT(s->ToJson(), HasSubstr("{\"mode\":\"sync\","));
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(ReadBytes(absl::StrCat(dir_, "/server_", k, ".args")),
              absl::StrCat("--port=0 --port_file=", options_.log_dir, "/ps_",
                           k, ".port --shard_index=", k,
                           " --num_shards=2 --optimizer=sgd --lr=0.05 "
                           "--mode=sync --num_workers=2 "
                           "--replicas_to_aggregate=1 --staleness=0 "
                           "--staleness_aware=false --drop_stale_threshold=5 "
                           "--sync_timeout_s=2.5 --min_replicas=2 "
                           "--epochs=2 --batch_size=32 --n_push=1 "
                           "--data_dir=", dir_, " --replicas=1 --gpus= "
                           "--local_aggregation=sum --lr_schedule=auto "
                           "--checkpoint_dir=", options_.log_dir, "/ckpt/shard",
                           k, " --checkpoint_every_s=2\n"));
    EXPECT_THAT(ReadBytes(absl::StrCat(dir_, "/worker_", k, ".args")),
                HasSubstr(" --task=train --mode=sync --epochs=2 "));
  }
  EXPECT_THAT(ReadBytes(dir_ + "/eval.args"),
              HasSubstr("--task=eval --mode=sync --ps_hosts="));
}

TEST_F(LauncherTest, StalenessAwareAsyncReachesServers) {
  Setup(-1);
  options_.staleness_aware = true;
  options_.staleness = 4;
  options_.workers = 3;
  ASSERT_TRUE(ValidateLaunchOptions(options_).ok());
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  ASSERT_TRUE(s.ok()) << s.status() << "\n" << out.str();
  EXPECT_THAT(ReadBytes(dir_ + "/server_1.args"),
              HasSubstr(" --mode=async --num_workers=3 "
                        "--replicas_to_aggregate=0 --staleness=4 "
                        "--staleness_aware=true --drop_stale_threshold=0 "));
  EXPECT_THAT(ReadBytes(dir_ + "/worker_2.args"),
              HasSubstr(" --num_workers=3 --task=train --mode=async "));
}

TEST_F(LauncherTest, AccuracyCurveDuringTraining) {
  // Workers train for about 3.4 s. A curve evaluation takes 0.5 s, longer
  // than the 0.4 s period, so a tick that finds one running is skipped:
  // evaluations start near 0.4, 1.2, 2.0, 2.8 s. The second one fails.
  Setup(-1, "", "sleep 3", "sleep 0.5");
  options_.eval_every = absl::Milliseconds(400);
  options_.eval_examples = 500;
  options_.curve_csv = dir_ + "/curve.csv";
  options_.summary_json = dir_ + "/summary.json";
  options_.save_params = dir_ + "/params.safetensors";
  options_.worker_args = {"--extra_worker=2"};
  std::ostringstream out;
  absl::StatusOr<Summary> s = RunCluster(options_, out, nullptr);
  const std::string text = out.str();
  ASSERT_TRUE(s.ok()) << s.status() << "\n" << text;

  // Successful curve evaluations report 0.80, 0.86, 0.89, ...; the final
  // full evaluation (0.875) closes the curve at training_seconds.
  const std::vector<CurvePoint>& curve = s->curve;
  ASSERT_GE(curve.size(), 4u) << text;
  EXPECT_DOUBLE_EQ(curve[0].test_accuracy, 0.80);
  EXPECT_DOUBLE_EQ(curve[1].test_accuracy, 0.86);
  EXPECT_DOUBLE_EQ(curve[2].test_accuracy, 0.89);
  EXPECT_DOUBLE_EQ(curve.back().test_accuracy, 0.875);
  EXPECT_DOUBLE_EQ(curve.back().seconds, s->training_seconds);
  EXPECT_GE(curve[0].seconds, 0.4);
  for (size_t i = 1; i + 1 < curve.size(); ++i) {
    // Not started while the previous one (0.5 s) was still running. (The
    // last point is the final evaluation at training_seconds, which may
    // come sooner after the last curve evaluation began.)
    EXPECT_GE(curve[i].seconds - curve[i - 1].seconds, 0.5) << i;
  }
  EXPECT_FALSE(std::ifstream(dir_ + "/curve_eval.overlap").good());
  EXPECT_DOUBLE_EQ(s->time_to_85.value_or(-2), curve[1].seconds);
  EXPECT_DOUBLE_EQ(s->time_to_88.value_or(-2), curve[2].seconds);

  EXPECT_THAT(text, HasSubstr(absl::StrFormat(
                        "\ncurve: t=%.1f s test_accuracy=0.8000\n",
                        curve[0].seconds)));
  EXPECT_THAT(text, HasSubstr(absl::StrFormat(
                        "\ncurve: t=%.1f s test_accuracy=0.8750\n",
                        s->training_seconds)));
  EXPECT_THAT(text, HasSubstr("\nlaunch: warning: curve eval failed (exit "
                              "code 4); training goes on\n"));
  EXPECT_THAT(text, HasSubstr("\ncurve eval: EVAL {"));
  absl::StatusOr<JsonNumbers> json =
      ParseJsonNumbers(ReadBytes(options_.summary_json));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_NEAR(json->at("time_to_85"), *s->time_to_85, 1e-6);
  EXPECT_NEAR(json->at("time_to_88"), *s->time_to_88, 1e-6);

  // Curve evaluations use part of the test set and save nothing.
  EXPECT_EQ(ReadBytes(dir_ + "/curve_eval.args"),
            absl::StrCat("--task=eval --mode=async "
                         "--ps_hosts=127.0.0.1:7000,127.0.0.1:7001 --data_dir=",
                         dir_, " --max_test_examples=500 --extra_worker=2\n"));
  EXPECT_THAT(ReadBytes(dir_ + "/eval.args"),
              HasSubstr(" --save_params=" + options_.save_params));
  EXPECT_THAT(ReadBytes(options_.log_dir + "/curve_eval.log"),
              HasSubstr("cannot connect"));

  std::string expected_csv = "seconds,test_accuracy\n";
  for (const CurvePoint& p : curve) {
    absl::StrAppendFormat(&expected_csv, "%.3f,%g\n", p.seconds,
                          p.test_accuracy);
  }
  EXPECT_EQ(ReadBytes(options_.curve_csv), expected_csv);
  ExpectServersGone();
}

}  // namespace
}  // namespace downpour
