// File: deploy/fs.h
//
// The small filesystem helpers the launcher and the multi-process tests
// share: directory and executable checks, mkdir -p, fresh log directories,
// the port files servers write, atomic writes and finding a sibling binary.
//
//   DP_ASSIGN_OR_RETURN(std::string dir, PrepareLogDir(""));  // $TMPDIR/...
//   if (std::optional<int> port = ReadPortFile(dir + "/ps_0.port")) ...
//   DP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/summary.json", json));
//
// Free functions without state; thread-safe as far as the filesystem is.
#ifndef DOWNPOUR_DEPLOY_FS_H_
#define DOWNPOUR_DEPLOY_FS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

bool IsDirectory(const std::string& path);

// A regular file this process may execute.
bool IsExecutableFile(const std::string& path);

// mkdir -p (mode 0755). FailedPrecondition naming the directory on failure.
absl::Status MakeDirs(const std::string& path);

// `requested` (created if missing) when non-empty, else a fresh directory
// $TMPDIR/downpour-launch-XXXXXX (/tmp without TMPDIR).
absl::StatusOr<std::string> PrepareLogDir(const std::string& requested);

// The decimal port in `path` (surrounding whitespace allowed), or nullopt if
// the file is missing or does not (yet) hold a port in [1, 65535].
std::optional<int> ReadPortFile(const std::string& path);

// Writes `contents` to a temporary file beside `path` and renames it over
// `path`, so readers see the old file or the new one, never half of one
// (common/atomic_file.h's AtomicWriteFile, no fsync). FailedPrecondition
// naming the path and the system's reason on failure.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents);

// Finds a sibling binary of the running executable. `relpath` is the
// workspace-relative path, e.g. "server/ps_server". For each exe in
// `exe_paths` (typically /proc/self/exe resolved, then argv[0]) it tries
//   $RUNFILES_DIR/downpour/<relpath>   (when RUNFILES_DIR is set; once)
//   <exe>.runfiles/downpour/<relpath>  (bazel run)
//   <dir of exe>/../<relpath>          (bazel-bin layout, bundle folder)
// and returns the first executable file. NotFound lists all tried paths.
absl::StatusOr<std::string> FindSiblingBinary(
    const std::vector<std::string>& exe_paths, absl::string_view relpath);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_FS_H_
