#include "worker/data/file_reading.h"

#include <libdeflate.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
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
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && st.st_size > 0) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return out;
}

// The inflated size a gzip stream's trailer gives (of its last member,
// modulo 2^32), 0 when there is none or when it claims more than 64 times
// `gz.size()` (data sets compress 2 to 5 times): a buffer of that size is
// taken before the data is checked, so a trailer that lies must not name
// much more than the file.
size_t GzipSizeHint(const std::string& gz) {
  if (gz.size() < 18) return 0;  // Header and trailer.
  const auto* b = reinterpret_cast<const unsigned char*>(gz.data() + gz.size() - 4);
  const size_t size = size_t{b[0]} | size_t{b[1]} << 8 | size_t{b[2]} << 16 |
                      size_t{b[3]} << 24;
  return size / 64 <= gz.size() ? size : 0;
}

// `gz` inflated in one call of libdeflate (two to three times zlib's speed)
// when it is one gzip member whose trailer gives its size (GzipSizeHint)
// and that inflates to exactly that with a good CRC; else nothing.
std::optional<std::string> InflateWhole(const std::string& gz) {
  const size_t size = GzipSizeHint(gz);
  if (size == 0) return std::nullopt;
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  if (d == nullptr) return std::nullopt;
  std::string out(size, '\0');
  size_t in_used = 0, out_used = 0;
  const libdeflate_result r = libdeflate_gzip_decompress_ex(
      d, gz.data(), gz.size(), out.data(), out.size(), &in_used, &out_used);
  libdeflate_free_decompressor(d);
  if (r != LIBDEFLATE_SUCCESS || in_used != gz.size() || out_used != size) {
    return std::nullopt;
  }
  return out;
}

// Inflates the whole of the gzip file `path`: in one call when it can
// (InflateWhole), else through zlib's stream, which reads several members
// and checks each one's CRC and length, so that a corrupt or cut-short
// stream is reported rather than returning partial data.
absl::StatusOr<std::string> ReadGzip(const std::string& path) {
  size_t hint = 0;
  {
    absl::StatusOr<std::string> gz = ReadRaw(path);  // NotFound, if so.
    if (!gz.ok()) return gz.status();
    if (std::optional<std::string> out = InflateWhole(*gz)) return *std::move(out);
    hint = GzipSizeHint(*gz);
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::DataLossError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(f, 1 << 17);
  std::string out;
  constexpr unsigned kChunk = 1 << 20;
  // With the trailer's size reserved, the buffer is not moved as it grows.
  out.reserve(hint + kChunk);
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
