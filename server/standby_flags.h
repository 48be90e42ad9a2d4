// File: server/standby_flags.h
//
// ps_server's flags for standby shards (server/replication.h): the lease.
// Which process is the standby and where its peer listens come from the
// cluster spec (--ps_standby_hosts, --task_type=ps_standby, or TF_CONFIG's
// "ps_standby" job; common/cluster_spec_flags.h). Only a main calls this.
//
//   DP_ASSIGN_OR_RETURN(absl::Duration lease, StandbyLeaseFromFlags());
#ifndef DOWNPOUR_SERVER_STANDBY_FLAGS_H_
#define DOWNPOUR_SERVER_STANDBY_FLAGS_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace downpour {

// --standby_lease_ms; InvalidArgument outside [50, 60000].
absl::StatusOr<absl::Duration> StandbyLeaseFromFlags();

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STANDBY_FLAGS_H_
