// File: deploy/node_args.h
//
// The argument handling of `node` (deploy/node_main.cc), the one entry point
// that runs as a parameter server or a worker according to the cluster spec:
// `srun -n 6 node --num_ps=2 --epochs=3 ...` and a TFJob's identical
// containers pass every task the same command line.
//
// `node` reads only the spec flags (--ps_hosts, --worker_hosts, --task_type,
// --task_index, --num_ps, --base_port; `--name=value` or `--name value`),
// its own --print_spec and --help. It then executes server/ps_server or
// worker/ps_worker with the whole command line (bar --print_spec) and
// `--undefok=<the flags given that the other binary defines>`, so that each
// binary takes its own flags and ignores the other's (a worker ignores
// --bind, a server --epochs), and a flag neither defines is refused by the
// child as unknown (exit 2, common/command_line.h).
//
// Pure functions; thread-safe.
#ifndef DOWNPOUR_DEPLOY_NODE_ARGS_H_
#define DOWNPOUR_DEPLOY_NODE_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"

namespace downpour {

struct NodeArgs {
  ClusterSpecInputs spec_inputs;
  bool print_spec = false;
  bool help = false;  // --help, --helpfull, --helpshort or -h.
  // Every argument but --print_spec, in order.
  std::vector<std::string> passthrough;
  // The names of the flags given ("--nofoo" gives "foo" and "nofoo").
  std::vector<std::string> flag_names;
};

// `args` without the program name. InvalidArgument for a positional
// argument, a spec flag without a value or a non-numeric index/count.
absl::StatusOr<NodeArgs> ParseNodeArgs(const std::vector<std::string>& args);

// argv of the child: `binary`, the passthrough arguments and
// --undefok=<the names of args.flag_names in `other_flags`>, the flags of
// the binary not run; every given name when `other_flags` is empty (not
// known).
std::vector<std::string> ChildArgv(const std::string& binary,
                                   const NodeArgs& args,
                                   const std::vector<std::string>& other_flags);

// The flag names in a binary's --helpfull output (abseil's format: lines
// "    --name (help); default: ...;").
std::vector<std::string> FlagNamesFromHelp(const std::string& helpfull);

// "server/ps_server" for a worker, "worker/ps_worker" for a ps: the binary
// whose flags the child ignores.
const char* OtherBinaryFor(const ClusterSpec& spec);

// What `node --help` prints.
std::string NodeUsage();

// "server/ps_server" for a ps, "worker/ps_worker" for a worker.
const char* ChildBinaryFor(const ClusterSpec& spec);

// One machine-readable line for --print_spec:
// "role=worker index=1 chief=false self=h:p ps=a:1,b:2 workers=c:3,d:4
//  source=TF_CONFIG".
std::string DescribeRole(const ClusterSpec& spec);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_NODE_ARGS_H_
