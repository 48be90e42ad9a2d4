// File: deploy/resume_check.h
//
// What launch does with a --log_dir that already holds snapshots, decided
// before any process starts. Every launch keeps the servers' snapshots in
// <log_dir>/ckpt/shard<k> (each with its job's identity in a JOB file,
// common/job_identity.h) and the workers' data positions in
// <log_dir>/ckpt/worker<i>.position; a run that succeeds removes ckpt, and
// one whose training finished marks it TRAINED. So a folder with snapshots
// is a run that was interrupted (Ctrl-C) or failed:
//
//   snapshots of another job            refused, naming what differs
//   a run whose training had finished   refused: nothing to resume
//   this job's, without --resume        refused: --resume continues it, a
//                                       fresh --log_dir starts anew
//   this job's, with --resume           the run continues from them
//   none, with --resume                 refused: nothing to resume
//
// Every refusal is FailedPrecondition (exit 2); --resume without --log_dir
// is InvalidArgument.
//
//   DP_ASSIGN_OR_RETURN(std::string line, CheckLogDirForResume(options));
//   if (!line.empty()) std::cout << line << "\n";  // "launch: resuming ..."
#ifndef DOWNPOUR_DEPLOY_RESUME_CHECK_H_
#define DOWNPOUR_DEPLOY_RESUME_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/launch_options.h"

namespace downpour {

// The marker of a run whose training finished: <log_dir>/ckpt/TRAINED.
inline constexpr char kTrainedMarker[] = "TRAINED";

// The identity (common/job_identity.h) the servers of `options` claim.
std::string LaunchJobIdentity(const LaunchOptions& options);

// The rule above. OK with "" for a folder without snapshots, or with the
// line to print when resuming:
//   "launch: resuming the job in <log_dir> from the snapshots of <S>
//    shards and the data positions of <P> of <W> workers"
absl::StatusOr<std::string> CheckLogDirForResume(const LaunchOptions& options);

// The command that resumes an interrupted run: `command_line` (argv as
// typed), with --log_dir=<log_dir> when it had none and --resume when it
// had none, each word quoted for a POSIX shell where needed.
std::string ResumeCommand(const std::vector<std::string>& command_line,
                          const std::string& log_dir);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_RESUME_CHECK_H_
