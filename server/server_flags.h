// File: server/server_flags.h
//
// Everything ps_server takes from its command line, read once in main:
// its own flags (port, bind, port file, shard, layout limits, transport
// limits, snapshots) and the shared ones: the job's shape
// (common/job_flags.h), how the store learns (server/store_flags.h), the
// cluster spec (common/cluster_spec_flags.h), metrics and security. The
// learning-rate schedule is sized here from the job's shape, so a shard
// started by the launcher, by `node` or by hand with the same job flags
// learns the same.
//
//   absl::ParseCommandLine(argc, argv);
//   absl::StatusOr<ServerFlags> flags = ReadServerFlags();  // bad flag: exit 2
#ifndef DOWNPOUR_SERVER_SERVER_FLAGS_H_
#define DOWNPOUR_SERVER_SERVER_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "server/ps_host.h"
#include "server/snapshotter.h"

namespace downpour {

struct ServerFlags {
  ParameterServerHostOptions host;
  std::optional<ClusterSpec> spec;  // Set when the job comes from a spec.
  double lr = 0;  // The rate for one worker (host.store holds it scaled).
  std::string port_file;
  // Snapshots and restore; an empty dir turns both off. The log is set by
  // the caller.
  SnapshotterOptions snapshots;
  // The job's identity for the checkpoint folder (common/job_identity.h).
  std::string job_identity;
  int64_t heap_trim_min_mb = 0;  // common/heap_trimmer.h.
  // --max_connections; 0: sized from the job (DefaultMaxConnections).
  int max_connections = 0;
};

// InvalidArgument (or FailedPrecondition for a spec naming another role)
// with the message to print for a bad flag.
absl::StatusOr<ServerFlags> ReadServerFlags();

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SERVER_FLAGS_H_
