#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// The folder holding `path`, for its fsync after the rename.
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// 16 random hex digits from the kernel's generator.
std::string RandomSuffix() {
  unsigned char bytes[8] = {};
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // Then O_EXCL still refuses a planted name.
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(
    const std::string& path, FileDurability durability) {
  // A fresh name each time, and never an existing file or symlink: a name
  // another user planted beside PATH cannot redirect the write.
  std::string tmp;
  int fd = -1;
  int err = 0;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = absl::StrCat(path, ".tmp.", RandomSuffix());
    fd = ::open(tmp.c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    err = fd < 0 ? errno : 0;
    if (fd < 0 && err != EEXIST) break;
  }
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write ", path, ": cannot create ", tmp, ": ", ErrnoText(err)));
  }
  return AtomicFileWriter(path, std::move(tmp), fd, durability);
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string tmp, int fd,
                                   FileDurability durability)
    : path_(std::move(path)),
      tmp_(std::move(tmp)),
      fd_(fd),
      durability_(durability) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::exchange(other.tmp_, std::string())),
      fd_(std::exchange(other.fd_, -1)),
      durability_(other.durability_),
      committed_(other.committed_),
      status_(std::move(other.status_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(
    AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    if (!committed_ && status_.ok()) CloseAndRemoveTmp();
    path_ = std::move(other.path_);
    tmp_ = std::exchange(other.tmp_, std::string());
    fd_ = std::exchange(other.fd_, -1);
    durability_ = other.durability_;
    committed_ = other.committed_;
    status_ = std::move(other.status_);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_ && status_.ok()) CloseAndRemoveTmp();
}

void AtomicFileWriter::CloseAndRemoveTmp() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Fail(absl::Status s) {
  CloseAndRemoveTmp();
  status_ = s;
  return s;
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (!status_.ok()) return status_;
  if (committed_ || fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("append to ", path_, " after its commit"));
  }
  while (!data.empty()) {
    const ssize_t w = ::write(fd_, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      return Fail(absl::UnavailableError(absl::StrCat(
          "cannot write ", path_, ": write to ", tmp_, " failed: ",
          ErrnoText(err))));
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (!status_.ok()) return status_;
  if (committed_ || fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is already committed"));
  }
  if (durability_ == FileDurability::kFsync && ::fsync(fd_) != 0) {
    const int err = errno;
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot write ", path_, ": fsync of ", tmp_, " failed: ",
        ErrnoText(err))));
  }
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int err = errno;
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot write ", path_, ": close of ", tmp_, " failed: ",
        ErrnoText(err))));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot write ", path_, ": cannot rename ", tmp_, " to it: ",
        ErrnoText(err))));
  }
  committed_ = true;
  if (durability_ == FileDurability::kFsync) {
    const std::string folder = FolderOf(path_);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = dir < 0 ? errno : 0;
    if (dir >= 0) {
      if (::fsync(dir) != 0) err = errno;
      ::close(dir);
    }
    if (err != 0) {
      status_ = absl::UnavailableError(absl::StrCat(
          "wrote ", path_, " but cannot fsync its folder ", folder, ": ",
          ErrnoText(err)));
      return status_;
    }
  }
  return absl::OkStatus();
}

absl::Status CreatePrivateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  // Each prefix ending at a '/', then the whole path.
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) == 0 || errno == EEXIST) continue;
    const int err = errno;
    return absl::UnavailableError(absl::StrCat(
        "cannot create folder ", prefix, ": ", ErrnoText(err)));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::UnavailableError(
        absl::StrCat("cannot create folder ", dir, ": not a folder"));
  }
  return absl::OkStatus();
}

absl::Status AtomicWriteFile(const std::string& path,
                             absl::string_view contents,
                             FileDurability durability) {
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path, durability);
  if (!w.ok()) return w.status();
  absl::Status s = w->Append(contents);
  if (!s.ok()) return s;
  return w->Commit();
}

}  // namespace downpour
