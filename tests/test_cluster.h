// File: tests/test_cluster.h
//
// Real parameter-server processes on loopback for the integration tests, in
// the spirit of TensorFlow's TestCluster: each shard is a ps_server child
// started with --port=0; its port is read back from its --port_file
// (deploy/fs.h's ReadPortFile), and it is reached on deploy's kDefaultHost.
//
//   DP_ASSIGN_OR_RETURN(auto cluster, TestCluster::Start({.num_shards = 2}));
//   client_options.hosts = cluster->hosts();
#ifndef DOWNPOUR_TESTS_TEST_CLUSTER_H_
#define DOWNPOUR_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/subprocess.h"

namespace downpour {

struct TestClusterOptions {
  int num_shards = 1;
  std::vector<std::string> server_flags;  // e.g. {"--optimizer=sgd", "--lr=1"}
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

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_TEST_CLUSTER_H_
