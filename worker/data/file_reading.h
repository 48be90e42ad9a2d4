// File: worker/data/file_reading.h
//
// Whole-file reads for the dataset readers: raw, or inflated when the name
// ends in ".gz": in one call of libdeflate when the file is one gzip member
// whose trailer gives its size, else through zlib's gz* API (both check
// the stream's CRC and length, so a corrupt or cut-short stream is an
// error, never partial data).
//
// Errors: NotFound when the file does not exist; DataLoss when it cannot be
// read or its gzip stream is corrupt. Every message names the file.
//
// Thread-safety: the functions keep no state; call them from any thread.
#ifndef DOWNPOUR_WORKER_DATA_FILE_READING_H_
#define DOWNPOUR_WORKER_DATA_FILE_READING_H_

#include <string>

#include "absl/status/statusor.h"

namespace downpour {
namespace data_internal {

bool FileExists(const std::string& path);

// The whole of `path`, without decompression.
absl::StatusOr<std::string> ReadRaw(const std::string& path);

// The whole of the gzip file `path`, inflated.
absl::StatusOr<std::string> ReadGzip(const std::string& path);

// ReadGzip when `path` ends in ".gz", else ReadRaw.
absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path);

}  // namespace data_internal
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_FILE_READING_H_
