#include "tests/proc_children.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::unique_ptr<Subprocess> StartLaunch(std::vector<std::string> flags) {
  SubprocessOptions o;
  o.argv = {"deploy/launch"};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  o.tail_lines = 60;
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

pid_t FindChild(pid_t parent, const std::vector<std::string>& needles) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm has no ") ".
    const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
    const size_t close = stat.rfind(") ");
    if (close == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    int ppid = 0;
    if (f.size() < 2 || !absl::SimpleAtoi(f[1], &ppid) || ppid != parent ||
        f[0] == "Z") {
      continue;
    }
    const std::string cmd = ReadAll(absl::StrCat("/proc/", pid, "/cmdline"));
    bool all = true;
    for (const std::string& n : needles) all &= absl::StrContains(cmd, n);
    if (all) return pid;
  }
  return 0;
}

}  // namespace downpour
