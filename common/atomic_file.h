// File: common/atomic_file.h
//
// Replacing a file atomically: the new contents go to a temporary file
// beside it, `PATH.tmp.<random>`, created with O_CREAT|O_EXCL|O_NOFOLLOW
// (a name planted in advance, a symlink included, is never opened), which
// is then renamed over PATH, so a reader (or a restart after a crash) sees
// the old file or the new one, never half of one. Every file is created
// mode 0600 (owner only, whatever the umask): it may hold a model, a
// snapshot or a worker's position. The one implementation behind the port
// files, data positions (their first write: later ones rewrite that file in
// place, worker/data_position.h), snapshots, saved parameters and launcher
// summaries. CreatePrivateDirectories makes the folders for them (0700).
//
//   DP_RETURN_IF_ERROR(AtomicWriteFile(path, text));  // small files
//
//   DP_ASSIGN_OR_RETURN(AtomicFileWriter w,           // large ones, streamed
//                       AtomicFileWriter::Open(path, FileDurability::kFsync));
//   for (...) DP_RETURN_IF_ERROR(w.Append(piece));
//   DP_RETURN_IF_ERROR(w.Commit());
//
// Errors are Unavailable, naming PATH (and the temporary file where that
// failed) with the system's reason; the temporary file is removed. A crash
// of the process may leave a `PATH.tmp.*` file behind. A caller that reports
// another code maps it (e.g. a launcher's output path is configuration:
// FailedPrecondition). The folder must exist.
//
// Two writers replacing one PATH at once each write their own temporary
// file; the last rename wins. Free functions are thread-safe as far as the file
// system is; an AtomicFileWriter is thread-compatible.
#ifndef DOWNPOUR_COMMON_ATOMIC_FILE_H_
#define DOWNPOUR_COMMON_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

enum class FileDurability {
  // Rename only: survives a crash of the process; a crash of the machine may
  // lose the latest write (or leave an empty file on some file systems).
  kRenameOnly,
  // Also survives a crash of the machine: fsync of the file before the
  // rename and of its folder after it.
  kFsync,
};

// Replaces `path` with `contents` (the new file has mode 0600).
absl::Status AtomicWriteFile(
    const std::string& path, absl::string_view contents,
    FileDurability durability = FileDurability::kRenameOnly);

// Streams a file's contents into a temporary file and renames it over PATH
// on Commit(). Destroying an uncommitted writer (or any failure) removes the
// temporary file and leaves PATH as it was. After a failure every later call
// returns that failure.
class AtomicFileWriter {
 public:
  // Creates a new temporary file `PATH.tmp.<random>` (mode 0600).
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path,
                                               FileDurability durability);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Writes all of `data` (unbuffered: it is in PATH.tmp when this returns).
  absl::Status Append(absl::string_view data);

  // Closes the temporary file (fsync first with kFsync) and renames it over PATH
  // (then fsync of the folder with kFsync). If only that last fsync fails,
  // PATH already holds the new contents and the error says so.
  absl::Status Commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd,
                   FileDurability durability);
  // Records `s` as the writer's failure, closing and removing the
  // temporary file.
  absl::Status Fail(absl::Status s);
  void CloseAndRemoveTmp();

  std::string path_;
  std::string tmp_;
  int fd_ = -1;  // Owned; -1 once closed.
  FileDurability durability_ = FileDurability::kRenameOnly;
  bool committed_ = false;
  absl::Status status_;  // The first failure.
};

// Creates `dir` and any missing parent, each new folder with mode 0700
// (existing ones are left as they are). Unavailable naming the folder that
// could not be made.
absl::Status CreatePrivateDirectories(const std::string& dir);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_ATOMIC_FILE_H_
