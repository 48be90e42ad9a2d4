// libFuzzer target: the cluster-spec parsers of common/cluster_spec.h and
// common/slurm_env.h:
// TF_CONFIG JSON, Slurm node lists and tasks-per-node, host lists and single
// host:port entries. The first byte picks the parser. An accepted spec must
// pass ValidateClusterSpec.
#include <cstdint>
#include <string>

#include "common/cluster_spec.h"
#include "common/slurm_env.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Byte() % 5;
  const std::string text = in.Rest();
  switch (which) {
    case 0: {
      absl::StatusOr<ClusterSpec> spec = FromTfConfig(text);
      if (spec.ok() && !ValidateClusterSpec(*spec).ok()) __builtin_trap();
      (void)(spec.ok() ? ClusterSpecToString(*spec) : "");
      break;
    }
    case 1:
      (void)ExpandSlurmNodeList(text);
      break;
    case 2:
      (void)ExpandSlurmTasksPerNode(text);
      break;
    case 3:
      (void)ParseHostList(text);
      break;
    default:
      (void)ParseHostPort(text);
      break;
  }
  return 0;
}
