#include "deploy/node_args.h"

#include <algorithm>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec_flags.h"

namespace downpour {
namespace {

absl::Status SetSpecFlag(const std::string& name, const std::string& value,
                         ClusterSpecInputs* in) {
  int* number = name == "task_index" ? &in->task_index
                : name == "num_ps"   ? &in->num_ps
                : name == "base_port" ? &in->base_port
                                      : nullptr;
  if (number != nullptr) {
    if (!absl::SimpleAtoi(value, number)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be an integer, got '", value, "'"));
    }
    return absl::OkStatus();
  }
  if (name == "ps_hosts") in->ps_hosts = value;
  if (name == "worker_hosts") in->worker_hosts = value;
  if (name == "ps_standby_hosts") in->ps_standby_hosts = value;
  if (name == "task_type") in->task_type = value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeArgs> ParseNodeArgs(const std::vector<std::string>& args) {
  NodeArgs out;
  std::set<std::string> names;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "-") || arg == "-" || arg == "--") {
      return absl::InvalidArgumentError(absl::StrCat(
          "node takes only flags, got '", arg, "'"));
    }
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const std::string name = body.substr(0, eq);
    if (name == "print_spec") {
      out.print_spec = eq == std::string::npos || body.substr(eq + 1) == "true";
      continue;
    }
    if (name == "help" || name == "helpfull" || name == "helpshort" ||
        name == "h") {
      out.help = true;
      continue;
    }
    out.passthrough.push_back(arg);
    if (name.empty() || name == "undefok") continue;
    names.insert(name);
    if (absl::StartsWith(name, "no")) names.insert(name.substr(2));
    const std::vector<std::string>& spec_flags = ClusterSpecFlagNames();
    if (std::find(spec_flags.begin(), spec_flags.end(), name) ==
        spec_flags.end()) {
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
      out.passthrough.push_back(value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value"));
    }
    if (absl::Status s = SetSpecFlag(name, value, &out.spec_inputs); !s.ok()) {
      return s;
    }
  }
  out.flag_names.assign(names.begin(), names.end());
  return out;
}

std::vector<std::string> ChildArgv(const std::string& binary,
                                   const NodeArgs& args,
                                   const std::vector<std::string>& other_flags) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.passthrough.begin(), args.passthrough.end());
  std::vector<std::string> undefok;
  for (const std::string& name : args.flag_names) {
    if (other_flags.empty() ||
        std::find(other_flags.begin(), other_flags.end(), name) !=
            other_flags.end()) {
      undefok.push_back(name);
    }
  }
  if (!undefok.empty()) {
    argv.push_back(absl::StrCat("--undefok=", absl::StrJoin(undefok, ",")));
  }
  return argv;
}

std::vector<std::string> FlagNamesFromHelp(const std::string& helpfull) {
  std::vector<std::string> names;
  for (absl::string_view line : absl::StrSplit(helpfull, '\n')) {
    if (!absl::ConsumePrefix(&line, "    --")) continue;
    const size_t end = line.find(" (");
    if (end == absl::string_view::npos || end == 0) continue;
    names.emplace_back(line.substr(0, end));
  }
  return names;
}

const char* ChildBinaryFor(const ClusterSpec& spec) {
  return spec.task_type == TaskType::kPs ? "server/ps_server"
                                         : "worker/ps_worker";
}

const char* OtherBinaryFor(const ClusterSpec& spec) {
  return spec.task_type == TaskType::kPs ? "worker/ps_worker"
                                         : "server/ps_server";
}

std::string NodeUsage() {
  return "node: runs as the parameter server or the worker that its cluster "
         "spec names,\nwith the same command line on every task.\n\n"
         "  node --ps_hosts=a:2222 --worker_hosts=b:2222,c:2222 "
         "--task_type=worker --task_index=0 --epochs=3\n"
         "  TF_CONFIG='{...}' node ...       (Kubeflow's TFJob)\n"
         "  srun -n 4 node --num_ps=1 ...    (Slurm)\n\n"
         "Its own flags:\n"
         "  --print_spec   print the resolved role, index and peers and exit\n"
         "  --ps_hosts, --worker_hosts, --task_type, --task_index, --num_ps, "
         "--base_port: the cluster spec\n"
         "Every other flag goes to ps_server or ps_worker: see "
         "`ps_server --help` and `ps_worker --help` (docs/flags.md).\n"
         "Exit status: the child's; 2 for a missing or bad spec.\n";
}

std::string DescribeRole(const ClusterSpec& spec) {
  return absl::StrCat("role=", TaskTypeName(spec.task_type),
                      " index=", spec.task_index,
                      " chief=", spec.IsChief() ? "true" : "false",
                      " self=", spec.SelfAddress(),
                      " ps=", absl::StrJoin(spec.ps, ","),
                      " workers=", absl::StrJoin(spec.workers, ","),
                      " source=", spec.source);
}

}  // namespace downpour
