// File: common/output_paths.h
//
// The files a process writes at its end (--save_params, --summary_json,
// --curve_csv, a log or checkpoint folder), checked at its start: the
// folder is created when missing, a file is created in it and removed
// again, and at least 1 MiB must be free there, so that a path that cannot be written stops the job before the
// first step (exit code 2) instead of after the last one.
//
//   DP_RETURN_IF_ERROR(PrepareOutputFile("save_params", f.save_params));
//   // FailedPrecondition: "--save_params=/ro/m.safetensors: cannot write
//   //   in /ro: Read-only file system"
//
// Free functions without state; thread-safe as far as the filesystem is.
#ifndef DOWNPOUR_COMMON_OUTPUT_PATHS_H_
#define DOWNPOUR_COMMON_OUTPUT_PATHS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace downpour {

// For the file `path` given as --`flag`: creates its folder (mkdir -p) and
// checks that a file can be created there. OK for an empty path (not
// asked for). FailedPrecondition naming the flag, the path and the system's
// reason, also when `path` is a folder.
absl::Status PrepareOutputFile(absl::string_view flag, const std::string& path);

// The same for the folder `dir` given as --`flag`: created when missing,
// then probed.
absl::Status PrepareOutputDir(absl::string_view flag, const std::string& dir);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_OUTPUT_PATHS_H_
