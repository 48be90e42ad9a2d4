#include "worker/data_position.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace downpour {
namespace {

constexpr char kHeader[] = "downpour data position v1";

}  // namespace

DataPositionFile::DataPositionFile(std::string path, std::string key)
    : path_(std::move(path)), key_(std::move(key)) {}

int64_t DataPositionFile::Read() const {
  std::ifstream in(path_);
  if (!in) return 0;
  std::string header, key, steps_line;
  std::getline(in, header);
  std::getline(in, key);
  std::getline(in, steps_line);
  int64_t steps = 0;
  if (header != kHeader || steps_line.rfind("steps ", 0) != 0 ||
      !absl::SimpleAtoi(steps_line.substr(6), &steps) || steps < 0) {
    std::fprintf(stderr,
                 "data position %s is unreadable; starting from the "
                 "beginning of the data\n",
                 path_.c_str());
    return 0;
  }
  if (key != absl::StrCat("key ", key_)) {
    std::fprintf(stderr,
                 "data position %s is for another job (%s, not key %s); "
                 "starting from the beginning of the data\n",
                 path_.c_str(), key.c_str(), key_.c_str());
    return 0;
  }
  return steps;
}

DataPositionFile::~DataPositionFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status DataPositionFile::Write(int64_t steps) {
  const std::string text =
      absl::StrCat(kHeader, "\nkey ", key_, "\nsteps ", steps, "\n");
  struct stat st;
  if (fd_ >= 0 && (::fstat(fd_, &st) != 0 || st.st_nlink == 0)) {
    ::close(fd_);  // Removed behind our back: write a new file.
    fd_ = -1;
  }
  if (fd_ >= 0 && text.size() >= written_size_) {
    // In place: one pwrite of a record at least as long as the last one
    // (the steps only grow), so a process killed at any moment leaves one
    // whole record.
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    if (n == static_cast<ssize_t>(text.size())) {
      written_size_ = text.size();
      return absl::OkStatus();
    }
    const int err = n < 0 ? errno : EIO;
    ::close(fd_);
    fd_ = -1;
    return absl::UnavailableError(absl::StrCat(
        "cannot write the data position ", path_, ": ", std::strerror(err)));
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  absl::Status written = AtomicWriteFile(path_, text);
  if (!written.ok()) {  // The folder, on the first write?
    const std::filesystem::path folder =
        std::filesystem::path(path_).parent_path();
    std::error_code ec;
    if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
      std::filesystem::create_directories(folder, ec);
      written = AtomicWriteFile(path_, text);
    }
  }
  if (!written.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the data position: ", written.message()));
  }
  // Later writes go straight into the file just renamed into place: a new
  // file and a rename per step cost a few hundred microseconds of the
  // training thread's time.
  // Never through a link, nor into anything but a plain file: a name
  // swapped in after the rename gets the next write a new file again.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ >= 0 && (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(fd_);
    fd_ = -1;
  }
  written_size_ = text.size();
  return absl::OkStatus();
}

absl::Status DataPositionFile::Remove() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (std::remove(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(absl::StrCat(
        "cannot remove the data position ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace downpour
