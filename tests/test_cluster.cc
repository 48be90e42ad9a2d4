#include "tests/test_cluster.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/test_files.h"
#include "deploy/cluster_plan.h"
#include "deploy/fs.h"
#include "gtest/gtest.h"

namespace downpour {

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    const TestClusterOptions& options) {
  const std::string dir = TestTmpDir();
  static int cluster_counter = 0;  // distinct port files per cluster
  const int id = cluster_counter++;
  std::unique_ptr<TestCluster> c(new TestCluster());
  std::vector<std::string> port_files;
  for (int k = 0; k < options.num_shards; ++k) {
    const std::string port_file =
        absl::StrCat(dir, "/cluster", id, "_shard", k, ".port");
    std::remove(port_file.c_str());
    SubprocessOptions so;
    so.argv = {options.server_binary, "--port=0",
               absl::StrCat("--port_file=", port_file),
               absl::StrCat("--shard_index=", k),
               absl::StrCat("--num_shards=", options.num_shards),
               absl::StrCat("--num_workers=", options.num_workers)};
    so.argv.insert(so.argv.end(), options.server_flags.begin(),
                   options.server_flags.end());
    so.log_path = absl::StrCat(dir, "/cluster", id, "_shard", k, ".log");
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(so);
    if (!p.ok()) return p.status();
    c->servers_.push_back(std::move(*p));
    port_files.push_back(port_file);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int k = 0; k < options.num_shards; ++k) {
    int port = 0;
    while (port == 0) {
      if (std::optional<int> p = ReadPortFile(port_files[k])) {
        port = *p;
        break;
      }
      c->servers_[k]->ReadAvailable(nullptr);
      if (c->servers_[k]->CheckExited() || absl::Now() > deadline) {
        std::string tail;
        for (const std::string& l : c->servers_[k]->tail()) absl::StrAppend(&tail, l, "\n");
        return absl::UnavailableError(
            absl::StrCat("ps_server shard ", k, " did not start:\n", tail));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    c->hosts_.push_back(absl::StrCat(kDefaultHost, ":", port));
  }
  return c;
}

bool TestCluster::AllRunning() {
  for (auto& s : servers_) {
    s->ReadAvailable(nullptr);
    if (s->CheckExited()) return false;
  }
  return true;
}

TestCluster::~TestCluster() {
  for (auto& s : servers_) s->Terminate(absl::Seconds(5));
}

std::unique_ptr<Subprocess> StartChild(std::vector<std::string> argv) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.tail_lines = 40;
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

::testing::AssertionResult WaitForWorkerStep(Subprocess* worker, int64_t step,
                                             absl::Duration timeout,
                                             std::vector<std::string>* seen) {
  std::vector<std::string> local;
  if (seen == nullptr) seen = &local;
  absl::StatusOr<std::string> line = worker->WaitForLine(
      [step](const std::string& l) {
        std::optional<WorkerProgress> p = ParseProgressLine(l);
        return p.has_value() && p->step >= step;
      },
      timeout, seen);
  if (line.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no progress line at step >= " << step << ": " << line.status()
         << "\n" << absl::StrJoin(*seen, "\n");
}

::testing::AssertionResult RunEval(const std::string& ps_hosts_flag,
                                   int max_test_examples,
                                   absl::Duration timeout, EvalOutput* out) {
  std::unique_ptr<Subprocess> eval = StartChild(
      {"worker/ps_worker", ps_hosts_flag, "--task=eval",
       absl::StrCat("--max_test_examples=", max_test_examples)});
  if (eval == nullptr) {
    return ::testing::AssertionFailure() << "ps_worker --task=eval not started";
  }
  if (!eval->WaitFor(timeout, &out->lines)) {
    return ::testing::AssertionFailure()
           << "ps_worker --task=eval still running after " << timeout << ":\n"
           << absl::StrJoin(out->lines, "\n");
  }
  for (const std::string& l : out->lines) {
    if (auto e = ParseEvalLine(l)) out->eval = e;
    if (auto s = ParseServerStatsLine(l)) out->server_stats = s;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace downpour
