#include "deploy/fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"

namespace downpour {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty() || IsDirectory(path)) return absl::OkStatus();
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    DP_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  }
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PrepareLogDir(const std::string& requested) {
  if (!requested.empty()) {
    DP_RETURN_IF_ERROR(MakeDirs(requested));
    return requested;
  }
  const char* tmp = getenv("TMPDIR");
  std::string tmpl = absl::StrCat((tmp && *tmp) ? tmp : "/tmp",
                                  "/downpour-launch-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a log directory from ", tmpl, ": ", strerror(errno)));
  }
  return tmpl;
}

std::optional<int> ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  int port;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ss.str()), &port) ||
      port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents) {
  const absl::Status s = AtomicWriteFile(path, contents);
  if (s.ok()) return s;
  // The launcher's output paths are configuration: fix, do not retry.
  return absl::FailedPreconditionError(s.message());
}

absl::StatusOr<std::string> FindSiblingBinary(
    const std::vector<std::string>& exe_paths, absl::string_view relpath) {
  std::vector<std::string> tried;
  auto try_path = [&tried](std::string p) -> std::optional<std::string> {
    if (std::find(tried.begin(), tried.end(), p) != tried.end()) {
      return std::nullopt;
    }
    tried.push_back(p);
    if (IsExecutableFile(p)) return p;
    return std::nullopt;
  };
  const char* runfiles = getenv("RUNFILES_DIR");
  if (runfiles != nullptr && *runfiles != '\0') {
    if (auto p = try_path(absl::StrCat(runfiles, "/downpour/", relpath))) {
      return *p;
    }
  }
  for (const std::string& exe : exe_paths) {
    if (exe.empty()) continue;
    if (auto p = try_path(absl::StrCat(exe, ".runfiles/downpour/", relpath))) {
      return *p;
    }
    size_t slash = exe.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : exe.substr(0, slash);
    if (auto p = try_path(absl::StrCat(dir, "/../", relpath))) return *p;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", relpath, "; tried: ", absl::StrJoin(tried, ", ")));
}

}  // namespace downpour
