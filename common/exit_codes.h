// File: common/exit_codes.h
//
// The one exit-code rule of ps_server, ps_worker, launch and node (which
// becomes one of the first two), so that a restart policy (Kubernetes' podFailurePolicy on
// ExitCode, Slurm's --requeue in an epilog, launch --max_restarts) can tell a
// failure worth retrying from one that will fail the same way again:
//
//   0  kExitOk         done (also after SIGTERM: drained, snapshot written or
//                      step pushed and left), and --help.
//   1  kExitOther      any other failure (a bug, a failed write, an internal
//                      error): retrying may help once; do not loop on it.
//   2  kExitFatal      bad flags or configuration (an unknown flag or a bad
//                      value, common/command_line.h; an output path that
//                      cannot be written; InvalidArgument,
//                      FailedPrecondition, NotFound, AlreadyExists,
//                      PermissionDenied, Unauthenticated, OutOfRange,
//                      Unimplemented): never retry, fix the command.
//   3  kExitRetryable  a lost peer or a timeout (Unavailable,
//                      DeadlineExceeded, Aborted, ResourceExhausted,
//                      Cancelled): restart it, the job can go on.
//
//   return ExitCodeForStatus(downpour::Run());
#ifndef DOWNPOUR_COMMON_EXIT_CODES_H_
#define DOWNPOUR_COMMON_EXIT_CODES_H_

#include "absl/status/status.h"

namespace downpour {

inline constexpr int kExitOk = 0;
inline constexpr int kExitOther = 1;
inline constexpr int kExitFatal = 2;
inline constexpr int kExitRetryable = 3;

// The exit code for a process whose main work ended with `s` (rule above).
inline int ExitCodeForStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return kExitFatal;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
      return kExitRetryable;
    default:
      return kExitOther;
  }
}

// True for an exit code that a supervisor should not restart.
inline bool IsFatalExitCode(int code) { return code == kExitFatal; }

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_EXIT_CODES_H_
