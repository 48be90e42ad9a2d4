// File: worker/worker_flags.h
//
// Everything ps_worker takes from its command line, read once in main into
// a WorkerOptions (worker/worker_job.h): its own flags (--worker_index,
// --task, --position_file, ...) and the shared ones: the job's shape
// (common/job_flags.h), training (worker/training_flags.h), backend
// (worker/backend_flags.h), transport (worker/transport_flags.h), the
// cluster spec, metrics and security.
//
//   absl::ParseCommandLine(argc, argv);
//   DP_ASSIGN_OR_RETURN(WorkerOptions f, ReadWorkerFlags());
#ifndef DOWNPOUR_WORKER_WORKER_FLAGS_H_
#define DOWNPOUR_WORKER_WORKER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/worker_job.h"

namespace downpour {

// InvalidArgument naming the flag for a bad value; FailedPrecondition when
// the cluster spec makes this task a server.
absl::StatusOr<WorkerOptions> ReadWorkerFlags();

// --position_file: where the worker keeps its data position ("" for none).
std::string PositionFileFromFlags();

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_WORKER_FLAGS_H_
