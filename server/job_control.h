// File: server/job_control.h
//
// How a parameter server of a job started from a cluster spec (TF_CONFIG,
// Slurm, --worker_hosts; common/cluster_spec.h) learns that the job is over:
// workers report WorkerDone, the chief sends EndJob once it has evaluated and
// written its outputs (proto/job_control.proto). A server started by hand (no
// spec) has none of this and serves until signalled.
//
//   JobState job(spec.workers.size(), "adagrad", 0.05);
//   auto service = NewJobControlService(&job, [&] { return aborted(); },
//                                       host_options.authenticator.get());
//   host_options.extra_services.push_back(service.get());
//   ... start the host ...
//   JobEnd end = WaitForJobEnd(&job, store, &stop_notification);
//   return end.exit_code;
//
// Thread-safety: JobState is thread-safe; the service calls it from gRPC's
// threads while main waits on it.
#ifndef DOWNPOUR_SERVER_JOB_CONTROL_H_
#define DOWNPOUR_SERVER_JOB_CONTROL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "rpc/auth_token.h"
#include "server/parameter_store.h"
#include "server/ps_host.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace downpour {

// How the job ended, as the server's process reports it.
struct JobEnd {
  int exit_code = 0;   // 0: succeeded (or stopped by a signal); 1: failed.
  std::string reason;  // One line for the log.
};

// One worker's final report.
struct WorkerReport {
  int worker_id = 0;
  std::string error;      // Empty: finished training.
  std::string done_line;  // Its DONE line (common/report.h), may be empty.
};

class JobState {
 public:
  JobState(int num_workers, std::string optimizer, double lr);

  // InvalidArgument for a worker id outside [0, num_workers). A worker that
  // reports again replaces its earlier report. Once every worker reported,
  // the job has ended (failed if any reported an error).
  absl::Status WorkerDone(WorkerReport report) ABSL_LOCKS_EXCLUDED(mu_);
  // The chief ends the job: succeeded with an empty `error`, else failed.
  // The first end wins; later ones are accepted and ignored.
  absl::Status EndJob(int worker_id, const std::string& error)
      ABSL_LOCKS_EXCLUDED(mu_);

  int num_workers() const { return num_workers_; }
  const std::string& optimizer() const { return optimizer_; }
  double lr() const { return lr_; }
  std::vector<WorkerReport> Reports() const ABSL_LOCKS_EXCLUDED(mu_);

  // The end, once there is one; waits up to `timeout` for it.
  std::optional<JobEnd> WaitForEnd(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool HasEnd() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return end_.has_value();
  }

  const int num_workers_;
  const std::string optimizer_;
  const double lr_;
  mutable absl::Mutex mu_;
  std::vector<WorkerReport> reports_ ABSL_GUARDED_BY(mu_);
  std::optional<JobEnd> end_ ABSL_GUARDED_BY(mu_);
};

// The JobControl gRPC service over `state` (not owned; must outlive it).
// `aborted` returns the store's abort reason ("" when none); called on
// GetJobState. `auth` (not owned, may be null: no token) is checked first in
// every handler; pass the host's (ParameterServerHostOptions::authenticator).
// With mutual TLS, WorkerDone for worker k is taken only from the certificate
// "worker-<k>" and EndJob only from the chief's, "worker-0" (or, unless
// `require_task_certificates`, from a job-wide certificate; rpc/
// peer_identity.h): PERMISSION_DENIED otherwise.
std::unique_ptr<grpc::Service> NewJobControlService(
    JobState* state, std::function<std::string()> aborted,
    const TokenAuthenticator* auth, bool require_task_certificates = false);

// A spec server's options: shard = task index, shards = number of ps
// entries, num_workers = number of workers (unless already set), listening
// on its own entry's port at `bind` if not empty, else at its entry's host.
// FailedPrecondition when the spec's task is not a ps.
absl::Status ApplyClusterSpec(const ClusterSpec& spec, const std::string& bind,
                              ParameterServerHostOptions* options);

// Blocks until the job ends (JobState), the store aborts (exit 1 with its
// reason) or `stop` is notified (a signal: exit 0, "stopped by a signal").
JobEnd WaitForJobEnd(JobState* state, const ParameterStore& store,
                     const absl::Notification* stop);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_JOB_CONTROL_H_
