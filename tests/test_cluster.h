// File: tests/test_cluster.h
//
// Real parameter-server processes on loopback for the integration tests, in
// the spirit of TensorFlow's TestCluster: each shard is a ps_server child
// started with --port=0; its port is read back from its --port_file
// (deploy/fs.h's ReadPortFile), and it is reached on deploy's kDefaultHost.
//
//   DP_ASSIGN_OR_RETURN(auto cluster, TestCluster::Start({.num_shards = 2}));
//   client_options.hosts = cluster->hosts();
//
// Also the steps the recovery tests share around real ps_worker processes:
// starting a child, waiting for a worker's progress line, running an eval.
//
//   auto w = StartChild({"worker/ps_worker", hosts, ...});
//   ASSERT_TRUE(WaitForWorkerStep(w.get(), 20, absl::Seconds(40), &seen));
//   EvalOutput eval;
//   ASSERT_TRUE(RunEval(hosts, 500, absl::Seconds(60), &eval));
//   ASSERT_TRUE(eval.server_stats.has_value());
#ifndef DOWNPOUR_TESTS_TEST_CLUSTER_H_
#define DOWNPOUR_TESTS_TEST_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/report.h"
#include "deploy/subprocess.h"
#include "gtest/gtest.h"

namespace downpour {

struct TestClusterOptions {
  int num_shards = 1;
  // --num_workers of every server (ps_server requires it); a --num_workers
  // in server_flags, which come after it, wins.
  int num_workers = 4;
  std::vector<std::string> server_flags;  // e.g. {"--optimizer=sgd", "--lr_schedule=none", "--lr=1"}
  // Path of the ps_server binary, relative to the test's runfiles root.
  std::string server_binary = "server/ps_server";
};

class TestCluster {
 public:
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      const TestClusterOptions& options);
  // Stops every server (SIGTERM, then SIGKILL).
  ~TestCluster();

  // "<kDefaultHost>:port" of shard 0, 1, ...
  const std::vector<std::string>& hosts() const { return hosts_; }
  // True when every server process is still running.
  bool AllRunning();
  Subprocess* server(int shard) { return servers_[shard].get(); }

 private:
  TestCluster() = default;
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::vector<std::string> hosts_;
};

// Starts a child process keeping its last 40 output lines; a failure to start
// is a test failure (reported here) and returns nullptr.
std::unique_ptr<Subprocess> StartChild(std::vector<std::string> argv);

// Reads `worker`'s output until a progress line (common/report.h's
// ParseProgressLine) at step >= `step`, for up to `timeout`; every line read
// is appended to *seen (may be null). A failure, naming why (the timeout or
// the exit status) with the lines read, when no such line came.
::testing::AssertionResult WaitForWorkerStep(Subprocess* worker, int64_t step,
                                             absl::Duration timeout,
                                             std::vector<std::string>* seen);

// What an eval process (`worker/ps_worker --task=eval`) printed.
struct EvalOutput {
  std::vector<std::string> lines;           // All of it.
  std::optional<EvalReport> eval;           // The last EVAL line.
  std::optional<JsonNumbers> server_stats;  // The last SERVER_STATS line.
};

// Runs `worker/ps_worker <ps_hosts_flag> --task=eval
// --max_test_examples=<max_test_examples>` (ps_hosts_flag is the whole
// "--ps_hosts=..." flag) until it exits, for up to `timeout`, and fills *out.
// A failure when it cannot be started or is still running at the timeout;
// its exit status is not checked (callers check the line they need).
::testing::AssertionResult RunEval(const std::string& ps_hosts_flag,
                                   int max_test_examples,
                                   absl::Duration timeout, EvalOutput* out);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_TEST_CLUSTER_H_
