// File: worker/job_end.h
//
// The worker's side of a job that ends by itself (proto/job_control.proto,
// server/job_control.h). Used only when the job comes from a cluster spec
// (TF_CONFIG, Slurm, --worker_hosts):
//
//  * a worker other than the chief reports WorkerDone (its DONE line, or its
//    error) to every server and exits;
//  * the chief (worker 0) trains, waits until every other worker reported
//    (WaitForWorkers), evaluates the servers' parameters, writes
//    --save_params and --summary_json (BuildChiefSummary: the launcher's
//    SUMMARY fields), then ends the job on every server (EndJob), which
//    makes the servers exit: 0 on success, 1 with the reason otherwise.
//
//   JobEndClient job(ps_hosts, security, rpc_timeout);
//   if (!chief) return job.ReportWorkerDone(w, train_status, done_line);
//   DP_ASSIGN_OR_RETURN(JobReports r, job.WaitForWorkers(0, 3600s));
//   ... eval ...
//   job.EndJob(0, error);
//
// Thread-compatible (one thread uses a client).
#ifndef DOWNPOUR_WORKER_JOB_END_H_
#define DOWNPOUR_WORKER_JOB_END_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/report.h"
#include "common/shard_stats.h"
#include "common/train_mode.h"
#include "rpc/credentials.h"

namespace downpour {

// What server 0 knows about the job once every worker but the chief
// reported.
struct JobReports {
  std::vector<DoneReport> done;    // Workers that finished (not the chief).
  std::vector<std::string> errors; // "worker <i>: <error>" of failed ones.
  std::string optimizer;           // The servers' optimizer and lr.
  double lr = 0;
};

class JobEndClient {
 public:
  // `ps_hosts`: every server, shard order; `standby_hosts`: each shard's
  // standby (empty: none). With standbys, a shard counts as told when
  // either of its two processes was (one of them may be dead), and server
  // 0's state is asked of its standby when its primary does not answer.
  // InvalidArgument for bad security options.
  static absl::StatusOr<std::unique_ptr<JobEndClient>> Create(
      const std::vector<std::string>& ps_hosts,
      const TransportSecurityOptions& security, absl::Duration rpc_timeout,
      const std::vector<std::string>& standby_hosts = {});
  ~JobEndClient();

  // Tells every server that `worker_id` is done; `result` not OK: failed.
  // Tries every server; the first failure is returned.
  absl::Status ReportWorkerDone(int worker_id, const absl::Status& result,
                                const std::string& done_line);

  // Polls server 0 until every worker other than `chief_id` has reported
  // (or the store aborted: Aborted). DeadlineExceeded after `timeout`,
  // naming the workers still missing.
  absl::StatusOr<JobReports> WaitForWorkers(int chief_id,
                                            absl::Duration timeout);

  // Ends the job on every server (`error` empty: succeeded). Tries every
  // server; the first failure is returned.
  absl::Status EndJob(int worker_id, const std::string& error);

 private:
  struct Stubs;
  JobEndClient(std::vector<std::string> hosts, std::unique_ptr<Stubs> stubs,
               absl::Duration rpc_timeout, int num_shards);
  // Calls `call` on every server; OK when each shard (its primary or its
  // standby) answered, else the first failure of a shard neither did.
  absl::Status CallEveryShard(
      const std::function<absl::Status(size_t)>& call) const;

  // The servers, then their standbys (hosts_[num_shards_ + k] is shard k's).
  const std::vector<std::string> hosts_;
  const int num_shards_;
  std::unique_ptr<Stubs> stubs_;
  const absl::Duration rpc_timeout_;
};

// What the chief knows at the end, for the summary.
struct ChiefRecord {
  TrainMode mode = TrainMode::kAsync;
  std::string log_dir;
  int servers = 0;
  int workers = 0;
  int epochs = 0;
  int batch_size = 0;
  DoneReport chief_done;
  JobReports others;
  EvalReport eval;
  std::vector<ShardStats> stats;
  double wall_seconds = 0;
};

// The launcher's SUMMARY JSON (common/run_summary.h) from the chief's
// record: training_seconds is the longest worker's, examples_per_sec the
// sum of examples over it.
std::string ChiefSummaryJson(const ChiefRecord& record);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_JOB_END_H_
