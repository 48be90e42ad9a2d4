// File: worker/data_position.h
//
// Where a training worker is in its data, kept in a
// small local file so that a restarted process of the same worker index
// resumes there instead of beginning its epochs again. The position is the
// number of steps taken (each step draws one batch per replica); the
// batches are a function of (seed, worker index, epoch, position), so
// skipping that many batches puts a new process exactly where the old one
// was. The file also holds a key naming what the position is valid for
// (worker index, job shape, data options); a file with another key is
// ignored.
//
//   DataPositionFile pos(path, key);
//   DP_ASSIGN_OR_RETURN(int64_t steps, pos.Read());   // 0 when none
//   ... after each push: pos.Write(steps);
//   ... at the natural end of training: pos.Remove();
//
// The first write goes to PATH.tmp.* and is renamed over PATH; the later
// ones overwrite that file in place with one pwrite of a record no shorter
// than the last (the steps only grow). So a process killed at any moment
// leaves the previous position or the new one, and a write costs the
// training thread a few microseconds. No fsync: a machine crash may lose
// the latest writes, and then the worker starts from an older position or
// from the beginning.
//
// Thread-compatible.
#ifndef DOWNPOUR_WORKER_DATA_POSITION_H_
#define DOWNPOUR_WORKER_DATA_POSITION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

class DataPositionFile {
 public:
  // `key` must not contain a newline.
  DataPositionFile(std::string path, std::string key);
  ~DataPositionFile();
  DataPositionFile(const DataPositionFile&) = delete;
  DataPositionFile& operator=(const DataPositionFile&) = delete;

  // The steps recorded for this key: 0 when there is no file; 0 with a
  // line on stderr when the file is for another key or unreadable (a stale
  // or damaged position must not stop a worker).
  int64_t Read() const;
  // Records `steps` (>= 0), creating the file's folder if needed.
  // Unavailable with the path and the system's reason when the file cannot
  // be written.
  absl::Status Write(int64_t steps);
  // Removes the file (no error when there is none).
  absl::Status Remove();

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const std::string key_;
  int fd_ = -1;              // The file written last, for in-place writes.
  size_t written_size_ = 0;  // The length of the record written last.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_POSITION_H_
