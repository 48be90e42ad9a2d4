#include "common/output_paths.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// mkdir -p; errno of the failing step, 0 on success.
int MakeDirs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (int e = MakeDirs(dir.substr(0, slash)); e != 0) return e;
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  return 0;
}

// Creates and removes a file in `dir`, and wants kMinFreeBytes free there;
// errno on failure (ENOSPC for too little room), 0 on success.
constexpr uint64_t kMinFreeBytes = uint64_t{1} << 20;
int ProbeWrite(const std::string& dir) {
  std::string name = dir + "/.downpour-write-probe-XXXXXX";
  const int fd = mkstemp(name.data());
  if (fd < 0) return errno;
  close(fd);
  unlink(name.c_str());
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) == 0 &&
      uint64_t{fs.f_bavail} * fs.f_frsize < kMinFreeBytes) {
    return ENOSPC;
  }
  return 0;
}

absl::Status Refused(absl::string_view flag, const std::string& path,
                     absl::string_view what, int error) {
  return absl::FailedPreconditionError(
      absl::StrCat("--", flag, "=", path, ": ", what, ": ",
                   std::strerror(error)));
}

}  // namespace

absl::Status PrepareOutputDir(absl::string_view flag, const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  if (int e = MakeDirs(dir); e != 0) {
    return Refused(flag, dir, "cannot create the folder", e);
  }
  if (int e = ProbeWrite(dir); e != 0) {
    return Refused(flag, dir, "cannot write in it", e);
  }
  return absl::OkStatus();
}

absl::Status PrepareOutputFile(absl::string_view flag,
                               const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--", flag, "=", path, " is a folder; give a file name"));
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (int e = MakeDirs(dir); e != 0) {
    return Refused(flag, path, absl::StrCat("cannot create the folder ", dir),
                   e);
  }
  if (int e = ProbeWrite(dir); e != 0) {
    return Refused(flag, path, absl::StrCat("cannot write in ", dir), e);
  }
  return absl::OkStatus();
}

}  // namespace downpour
