// node: runs as a parameter server or a worker according to the cluster
// spec (flags, TF_CONFIG or Slurm; common/cluster_spec.h), so that every
// task of a Slurm step or a TFJob runs the same command (deploy/node_args.h).
//
//   srun -n 6 node --num_ps=2 --epochs=3 --summary_json=out/summary.json
//   TF_CONFIG='{"cluster":...,"task":{"type":"ps","index":0}}' node --bind=0.0.0.0
//   node --print_spec            # print the resolved role and exit
//
// Exit status: the child's (node replaces itself with it); 0 for --help and
// --print_spec; 2 for a missing or malformed spec.
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/cluster_spec.h"
#include "common/process_setup.h"
#include "deploy/fs.h"
#include "deploy/model_check.h"
#include "deploy/node_args.h"

namespace {

// What `binary --helpfull` prints on stdout; "" when it cannot be run.
std::string HelpOf(const std::string& binary) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "";
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    execl(binary.c_str(), binary.c_str(), "--helpfull", nullptr);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0 ||
         (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<downpour::NodeArgs> parsed = downpour::ParseNodeArgs(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "node: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->help) {
    std::fputs(downpour::NodeUsage().c_str(), stdout);
    return 0;
  }
  absl::StatusOr<std::optional<downpour::ClusterSpec>> spec =
      downpour::ResolveClusterSpec(parsed->spec_inputs,
                                   downpour::ProcessEnvLookup());
  if (!spec.ok()) {
    std::fprintf(stderr, "node: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  if (!spec->has_value()) {
    std::fprintf(stderr,
                 "node: no cluster spec: give --ps_hosts and --worker_hosts "
                 "(with --task_type, --task_index), or set TF_CONFIG, or run "
                 "under srun\n");
    return 2;
  }
  const downpour::ClusterSpec& s = **spec;
  // The model spec, before the child starts serving or training.
  if (const std::string model = downpour::FlagValueIn(args, "model");
      !model.empty()) {
    const std::string dataset = downpour::FlagValueIn(args, "dataset");
    downpour::DatasetKind kind = downpour::DatasetKind::kFashionMnist;
    std::string error;
    if (!dataset.empty() && !AbslParseFlag(dataset, &kind, &error)) {
      std::fprintf(stderr, "node: --dataset: %s\n", error.c_str());
      return 2;
    }
    if (absl::Status m = downpour::CheckJobModel(model, kind); !m.ok()) {
      std::fprintf(stderr, "node: %s\n", std::string(m.message()).c_str());
      return 2;
    }
  }
  if (parsed->print_spec) {
    std::printf("%s\n", downpour::DescribeRole(s).c_str());
    return 0;
  }
  // No other set-up: node replaces itself with its child, which logs the
  // spec and does its own (common/process_setup.h).
  std::vector<std::string> exes;
  if (std::string self = downpour::SelfExePath(); !self.empty()) {
    exes.push_back(std::move(self));
  }
  exes.push_back(argv[0]);
  absl::StatusOr<std::string> binary =
      downpour::FindSiblingBinary(exes, downpour::ChildBinaryFor(s));
  if (!binary.ok()) {
    std::fprintf(stderr, "node: %s\n", std::string(binary.status().message()).c_str());
    return 2;
  }
  // The other binary's flags are the ones the child may ignore.
  std::vector<std::string> other_flags;
  if (absl::StatusOr<std::string> other = downpour::FindSiblingBinary(
          exes, downpour::OtherBinaryFor(s));
      other.ok()) {
    other_flags = downpour::FlagNamesFromHelp(HelpOf(*other));
  }
  const std::vector<std::string> child =
      downpour::ChildArgv(*binary, *parsed, other_flags);
  std::vector<char*> child_argv;
  for (const std::string& a : child) child_argv.push_back(const_cast<char*>(a.c_str()));
  child_argv.push_back(nullptr);
  execv(binary->c_str(), child_argv.data());
  std::fprintf(stderr, "node: cannot run %s: %s\n", binary->c_str(),
               std::strerror(errno));
  return 1;
}
