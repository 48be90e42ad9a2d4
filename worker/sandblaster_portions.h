// File: worker/sandblaster_portions.h
//
// The work-portion table of Sandblaster's coordinator (Dean et al. 2012),
// with no RPC in it. Each evaluation of the objective (a gradient, or a
// line search's trial point) covers one batch of examples cut into many
// more portions than there are workers. Workers ask for work (GetWork) as
// they free up and get:
//
//  * kCompute a portion: first the ones never handed out, in order; once
//    all are out, a copy of an unfinished one (a backup task: the fewest
//    holders first, at most `max_copies` holders at once), so that a slow
//    or dead worker never holds the evaluation back;
//  * kPush once every portion's result is in and the worker holds results
//    that were used: it pushes its accumulated gradient to the shards once,
//    and says so in its next request;
//  * kWait when there is nothing to do yet; kDone when the job is over.
//
// A reported result is `accepted` when it is the portion's first; a later
// copy's result is discarded by its worker (counted as a backup portion).
// A worker that holds used results and has not confirmed its push
// `push_timeout` after the results were all in is given up on: its portions
// are handed out again and the evaluation goes on without it (its next
// request is answered `discard`, and it computes again from the next
// evaluation). A request under a new incarnation (a restarted process) is
// treated alike when the old process held results it had not pushed.
// Either way the worker computes nothing more for that evaluation, so no
// gradient reaches the shards twice.
//
//   PortionTable table(options);
//   // driver thread:
//   DP_ASSIGN_OR_RETURN(EvalOutcome r, table.Evaluate(eval, portions));
//   // then gather the gradient of r.workers for `eval` on the shards
//   // any worker's thread (or the coordinator service):
//   WorkOrder o = table.GetWork(report);
//
// Thread-safety: every method may be called concurrently; Evaluate from one
// thread at a time.
#ifndef DOWNPOUR_WORKER_SANDBLASTER_PORTIONS_H_
#define DOWNPOUR_WORKER_SANDBLASTER_PORTIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

enum class WorkAction : int32_t {
  kCompute = 0,
  kPush = 1,
  kWait = 2,
  kDone = 3,
};

// A worker's request (proto/sandblaster.proto's WorkRequest).
struct WorkReport {
  int32_t worker = 0;
  // The portion just computed (-1: none) of evaluation `eval`.
  int64_t eval = 0;
  int32_t portion = -1;
  double loss_sum = 0;  // Finite.
  // Informational: the coordinator counts the portion's own examples.
  int64_t examples = 0;
  // The worker's accumulated gradient of this evaluation is on every shard
  // (0: none).
  int64_t pushed_eval = 0;
  // Only ask whether `eval` is still open.
  bool poll = false;
  // The worker process's incarnation (random per process): a worker that
  // comes back under another one lost what it held, so its used results
  // are handed out again.
  uint64_t incarnation = 0;
};

// The answer (WorkResponse).
struct WorkOrder {
  WorkAction action = WorkAction::kWait;
  int64_t eval = 0;
  int32_t portion = -1;
  int64_t first_example = 0;  // Position in the data order.
  int32_t num_examples = 0;
  bool accepted = false;    // The reported portion's result is used.
  bool discard = false;     // Drop the accumulated gradient of `eval`.
  bool eval_open = false;   // For a poll.
  std::string message;      // With kDone: why.
};

struct Portion {
  int64_t first_example = 0;
  int32_t num_examples = 0;
};

// An evaluation's result: the summed loss of every portion, its examples,
// and the workers whose pushed gradients together hold exactly those
// portions' gradient sum.
struct EvalOutcome {
  double loss_sum = 0;
  int64_t examples = 0;
  std::vector<int32_t> workers;
  int32_t backups_issued = 0;
  int32_t workers_given_up = 0;
};

struct PortionTableOptions {
  int32_t num_workers = 1;
  // Holders of one unfinished portion at once (the first one included).
  int32_t max_copies = 3;
  absl::Duration push_timeout = absl::Seconds(5);
  // Evaluate fails with DeadlineExceeded when an evaluation takes longer
  // (no worker left to compute).
  absl::Duration eval_timeout = absl::Minutes(5);
};

class PortionTable {
 public:
  explicit PortionTable(PortionTableOptions options);

  // Any worker's request; never blocks for long. InvalidArgument (nothing
  // changed) for a worker outside [0, num_workers) or a loss that is not
  // finite. A repeated report of a portion this worker (same incarnation)
  // already won is answered `accepted` again (a retry whose first reply
  // was lost), with the portion it was handed then if that is unfinished.
  absl::StatusOr<WorkOrder> GetWork(const WorkReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Opens evaluation `eval` (larger than every earlier one) over `portions`
  // and blocks until every portion's result is in and every worker holding
  // used results confirmed its push. Cancelled after Finish;
  // DeadlineExceeded after eval_timeout.
  absl::StatusOr<EvalOutcome> Evaluate(int64_t eval,
                                       std::vector<Portion> portions)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every later request is answered kDone with `why`; a waiting Evaluate
  // returns Cancelled.
  void Finish(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Distinct workers answered kDone so far.
  int32_t WorkersToldDone() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every worker in [0, num_workers) asked for work at least
  // once (a poll does not count), Finish, or `max_wait`; returns how many
  // have asked. The chief calls it before the first evaluation, so that
  // the portions are shared among the whole job rather than taken by
  // whoever is up first; a worker that comes later joins where it finds
  // the job.
  int32_t WaitForWorkers(absl::Duration max_wait) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    Portion portion;
    bool issued = false;
    int32_t winner = -1;
    double loss_sum = 0;
  };
  struct WorkerState {
    // What the worker computes now (-1: nothing), of eval `holding_eval`.
    int32_t holding = -1;
    int64_t holding_eval = 0;
    std::set<int32_t> won;  // Portions of the current eval it won.
    bool pushed = false;
    bool given_up = false;
    uint64_t incarnation = 0;
    // The evaluation it may not compute for any more (given up on, or a
    // new process): anything it pushed there stays as it is.
    int64_t benched_eval = -1;
  };

  bool AllResultsIn() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the used results of `w` out again (it cannot push them).
  void Reopen(WorkerState* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives up on the workers that did not push in time; true if any.
  bool GiveUpOnLatePushers(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int32_t Holders(int32_t portion) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkOrder Assign(int32_t worker, int32_t portion)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PortionTableOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // A worker joined, a result or a push came in,
                          // or Finish.
  int64_t eval_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::map<int32_t, WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  // When the last result of the open evaluation came in.
  absl::Time results_in_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int32_t backups_issued_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t given_up_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string finish_reason_ ABSL_GUARDED_BY(mu_);
  std::set<int32_t> told_done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SANDBLASTER_PORTIONS_H_
