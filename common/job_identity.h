// File: common/job_identity.h
//
// Which job a checkpoint folder's snapshots belong to. A shard writes its
// job's identity, the values that size the learning-rate schedule and the
// data order (shards, workers, mode, epochs, batch size, data set and its
// cut, replicas), into <checkpoint_dir>/JOB before it serves, and refuses to
// start on a folder whose JOB names another job: restoring another job's
// parameters (and its schedule's position) would train the wrong model
// without a word. A shard restarted within the same job finds its own
// identity and restores silently. Writing JOB is also the start-up check
// that the folder can be written at all.
//
//   JobIdentity id;  id.shards = 2; id.workers = 4; ...
//   DP_RETURN_IF_ERROR(ClaimCheckpointDir("/ckpt/shard0", JobIdentityText(id)));
//
// The launcher reads the same files to refuse, before anything starts, a
// --log_dir that holds another job's snapshots or, without --resume, this
// job's (deploy/resume_check.h). No state; thread-compatible.
#ifndef DOWNPOUR_COMMON_JOB_IDENTITY_H_
#define DOWNPOUR_COMMON_JOB_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dataset_kind.h"
#include "common/train_mode.h"

namespace downpour {

// The file in a checkpoint folder that names its job, and the one a shard
// of a cluster-spec job writes beside it when the job has ended well.
inline constexpr char kJobFileName[] = "JOB";
inline constexpr char kJobFinishedFileName[] = "FINISHED";

struct JobIdentity {
  int shards = 1;
  int workers = 1;  // As the servers count them (replicas when each pushes).
  TrainMode mode = TrainMode::kAsync;
  int epochs = 3;
  int batch_size = 64;
  int n_push = 1;
  DatasetKind dataset = DatasetKind::kFashionMnist;
  int64_t max_train_examples = 0;  // 0: all.
  int replicas_per_worker = 1;
  bool local_sum = true;  // --local_aggregation=sum.
};

// One line of "name=value" pairs separated by spaces, in a fixed order:
//   "shards=2 workers=2 mode=async epochs=3 batch_size=64 n_push=1
//    dataset=fashion_mnist max_train_examples=0 replicas=1
//    local_aggregation=sum"
std::string JobIdentityText(const JobIdentity& id);

// What differs between the identity found in a folder (`there`) and this
// job's (`here`): "epochs 5 there, 3 here; workers 2 there, 4 here"; a
// name present on one side only is shown with "(none)". "" when equal.
std::string JobIdentityDifference(absl::string_view there,
                                  absl::string_view here);

// The identity in <dir>/JOB: nullopt when there is no such file;
// DataLoss naming the file when it cannot be read or is not a JOB file.
absl::StatusOr<std::optional<std::string>> ReadJobIdentity(
    const std::string& dir);

// A shard's start on `dir`: creates the folder if needed, then
//  * <dir>/JOB names another job: FailedPrecondition
//    "--checkpoint_dir=<dir> holds the snapshots of another job (<what
//    differs>); give this job a fresh --checkpoint_dir";
//  * <dir>/FINISHED exists (MarkJobFinished): FailedPrecondition "... holds
//    the snapshots of a job that finished; nothing to resume ...";
//  * otherwise writes `identity` there (atomically); FailedPrecondition
//    "--checkpoint_dir=<dir> cannot be written: <why>" when that fails.
// An empty `identity` (a caller that does not know the job) matches any.
absl::Status ClaimCheckpointDir(const std::string& dir,
                                const std::string& identity);

// Writes <dir>/FINISHED: the job whose snapshots `dir` holds has ended (its
// chief said so), so restoring them would train nothing. Unavailable with
// the reason when the file cannot be written.
absl::Status MarkJobFinished(const std::string& dir);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_JOB_IDENTITY_H_
