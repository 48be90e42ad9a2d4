// File: tests/standby_cluster.h
//
// A job with standby shards for the tests: fixed loopback ports (free ones,
// picked up front, since a cluster spec names every address before any
// process starts), the spec flags each process takes, and ps_server
// processes started as a shard's primary task or its standby task.
//
//   StandbyJob job = StandbyJob::Make(/*shards=*/1, /*workers=*/2);
//   auto p = StartSpecServer(job, "ps", 0, {"--mode=async"});
//   auto s = StartSpecServer(job, "ps_standby", 0, {"--mode=async"});
//   worker argv += job.SpecFlags("worker", 1);
#ifndef DOWNPOUR_TESTS_STANDBY_CLUSTER_H_
#define DOWNPOUR_TESTS_STANDBY_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "deploy/subprocess.h"

namespace downpour {

struct StandbyJob {
  std::vector<std::string> ps, standby, workers;  // "127.0.0.1:port"

  // Free ports for every task (bound and released at once).
  static StandbyJob Make(int shards, int workers);
  // --ps_hosts, --ps_standby_hosts, --worker_hosts, --task_type,
  // --task_index.
  std::vector<std::string> SpecFlags(const std::string& task_type,
                                     int index) const;
};

// ps_server for `task_type` ("ps" or "ps_standby") `index` of `job` with
// `flags`; waits (up to `timeout`) until it says it listens. Null (and a test
// failure) when it does not.
std::unique_ptr<Subprocess> StartSpecServer(
    const StandbyJob& job, const std::string& task_type, int index,
    const std::vector<std::string>& flags,
    absl::Duration timeout = absl::Seconds(30));

// Reads `p`'s output until a line containing `text` (appending every line
// to *seen, may be null); false when none came within `timeout`.
bool WaitForText(Subprocess* p, const std::string& text, absl::Duration timeout,
                 std::vector<std::string>* seen = nullptr);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_STANDBY_CLUSTER_H_
