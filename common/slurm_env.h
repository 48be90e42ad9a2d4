// File: common/slurm_env.h
//
// A job's cluster spec from the variables Slurm sets for each task of a job
// step (see common/cluster_spec.h for the other sources and for
// ResolveClusterSpec, which calls FromSlurm when SLURM_PROCID is set):
// SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_STEP_NODELIST
// (else SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE). Ranks are placed on the nodes in order (block
// distribution); the first `num_ps` ranks are servers, the rest workers; a
// task listens on `base_port` + its offset among the tasks of its node (the
// scheme of TensorFlow's SlurmClusterResolver).
//
// Usage:
//   DP_ASSIGN_OR_RETURN(ClusterSpec spec,
//                       FromSlurm(ProcessEnvLookup(), /*num_ps=*/2,
//                                 /*base_port=*/2222));
#ifndef DOWNPOUR_COMMON_SLURM_ENV_H_
#define DOWNPOUR_COMMON_SLURM_ENV_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"

namespace downpour {

// Slurm hostlist expression -> node names, in order:
// "n[1-3,7],m5" -> n1 n2 n3 n7 m5; "node[01-03]" -> node01 node02 node03
// (a zero-padded lower bound sets the width); several bracket groups in one
// name expand left group outermost: "r[1-2]-n[1-2]" -> r1-n1 r1-n2 r2-n1
// r2-n2. `what` names the variable in errors.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(
    absl::string_view nodelist, absl::string_view what = "node list");

// Slurm tasks-per-node expression -> one count per node:
// "3(x2),2" -> 3 3 2. Counts are >= 1.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view tasks_per_node, absl::string_view what = "tasks per node");

// From the Slurm variables of a job step (see the file comment). Where Slurm
// also sets SLURM_NODEID / SLURM_LOCALID they must agree with the block
// placement computed here (otherwise the step was launched with another
// --distribution, and peers' addresses would be wrong).
absl::StatusOr<ClusterSpec> FromSlurm(const EnvLookup& env, int num_ps,
                                      int base_port);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SLURM_ENV_H_
