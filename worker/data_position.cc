#include "worker/data_position.h"

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

absl::Status DataPositionFile::Write(int64_t steps) const {
  const std::string tmp = path_ + ".tmp";
  const std::string text =
      absl::StrCat(kHeader, "\nkey ", key_, "\nsteps ", steps, "\n");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr && errno == ENOENT) {  // The folder, on the first write.
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(path_).parent_path(), ec);
    f = std::fopen(tmp.c_str(), "w");
  }
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write the data position ", tmp, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) ==
                       text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write the data position ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status DataPositionFile::Remove() const {
  if (std::remove(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(absl::StrCat(
        "cannot remove the data position ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace downpour
