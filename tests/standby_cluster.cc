#include "tests/standby_cluster.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

// Binds every socket before releasing any, so the ports differ.
std::vector<int> FreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot pick a free port";
      ports.push_back(0);
    } else {
      ports.push_back(ntohs(a.sin_port));
    }
    fds.push_back(fd);
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  return ports;
}

}  // namespace

StandbyJob StandbyJob::Make(int shards, int workers) {
  const std::vector<int> ports = FreePorts(2 * shards + workers);
  StandbyJob job;
  int next = 0;
  for (int i = 0; i < shards; ++i) {
    job.ps.push_back(absl::StrCat("127.0.0.1:", ports[next++]));
  }
  for (int i = 0; i < shards; ++i) {
    job.standby.push_back(absl::StrCat("127.0.0.1:", ports[next++]));
  }
  for (int i = 0; i < workers; ++i) {
    job.workers.push_back(absl::StrCat("127.0.0.1:", ports[next++]));
  }
  return job;
}

std::vector<std::string> StandbyJob::SpecFlags(const std::string& task_type,
                                               int index) const {
  return {absl::StrCat("--ps_hosts=", absl::StrJoin(ps, ",")),
          absl::StrCat("--ps_standby_hosts=", absl::StrJoin(standby, ",")),
          absl::StrCat("--worker_hosts=", absl::StrJoin(workers, ",")),
          absl::StrCat("--task_type=", task_type),
          absl::StrCat("--task_index=", index)};
}

bool WaitForText(Subprocess* p, const std::string& text, absl::Duration timeout,
                 std::vector<std::string>* seen) {
  absl::StatusOr<std::string> line = p->WaitForLine(
      [&text](const std::string& l) { return absl::StrContains(l, text); },
      timeout, seen);
  return line.ok();
}

std::unique_ptr<Subprocess> StartSpecServer(
    const StandbyJob& job, const std::string& task_type, int index,
    const std::vector<std::string>& flags, absl::Duration timeout) {
  std::vector<std::string> argv = {"server/ps_server"};
  for (const std::string& f : job.SpecFlags(task_type, index)) argv.push_back(f);
  for (const std::string& f : flags) argv.push_back(f);
  std::unique_ptr<Subprocess> p = StartChild(argv);
  if (p == nullptr) return nullptr;
  std::vector<std::string> seen;
  if (!WaitForText(p.get(), "listening on", timeout, &seen)) {
    ADD_FAILURE() << task_type << " " << index << " did not start:\n"
                  << absl::StrJoin(seen, "\n");
    return nullptr;
  }
  return p;
}

}  // namespace downpour
