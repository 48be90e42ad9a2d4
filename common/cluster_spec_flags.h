// File: common/cluster_spec_flags.h
//
// The flags that place a process in its job, defined once for ps_server and
// ps_worker (and named for `node`, which reads them itself): --ps_hosts,
// --worker_hosts, --ps_standby_hosts, --task_type, --task_index, --num_ps, --base_port (the
// cluster spec, common/cluster_spec.h) and --num_workers (the job's worker
// count when no spec gives it). Only a main calls these functions.
//
//   absl::ParseCommandLine(argc, argv);
//   ClusterSpecInputs in = ClusterSpecInputsFromFlags("ps");
//   DP_ASSIGN_OR_RETURN(auto spec, ResolveClusterSpec(in, ProcessEnvLookup()));
#ifndef DOWNPOUR_COMMON_CLUSTER_SPEC_FLAGS_H_
#define DOWNPOUR_COMMON_CLUSTER_SPEC_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"

namespace downpour {

// The spec flags' values; an empty --task_type becomes `default_task_type`
// ("ps" for ps_server, "worker" for ps_worker).
ClusterSpecInputs ClusterSpecInputsFromFlags(absl::string_view default_task_type);

// --num_workers: the workers of a job started without a spec; 0 when not
// given (a worker then counts itself alone; ps_server refuses to start).
int NumWorkersFromFlags();

// The names of the seven spec flags, for `node`'s own reading of them.
const std::vector<std::string>& ClusterSpecFlagNames();

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_CLUSTER_SPEC_FLAGS_H_
