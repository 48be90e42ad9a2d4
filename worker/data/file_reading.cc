#include "worker/data/file_reading.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace data_internal {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Reads the whole of `path` without decompression.
absl::StatusOr<std::string> ReadRaw(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return out;
}

// Inflates the whole of the gzip file `path`. zlib checks the stream's CRC and
// length, so a corrupt or cut-short stream is reported rather than returning
// partial data.
absl::StatusOr<std::string> ReadGzip(const std::string& path) {
  if (!FileExists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(f, 1 << 17);
  std::string out;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int n = gzread(f, &out[old], kChunk);
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt gzip stream: ", msg));
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A stream that ends early makes gzread return the bytes it had and leave
  // Z_BUF_ERROR ("unexpected end of file") behind.
  int errnum = Z_OK;
  const std::string msg = gzerror(f, &errnum);
  const int close_rc = gzclose(f);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt gzip stream: ", msg));
  }
  if (close_rc != Z_OK) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt gzip stream (close failed, code ",
                     close_rc, ")"));
  }
  return out;
}

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  if (absl::EndsWith(path, ".gz")) return ReadGzip(path);
  return ReadRaw(path);
}

}  // namespace data_internal
}  // namespace downpour
