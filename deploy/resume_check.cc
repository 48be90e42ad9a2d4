#include "deploy/resume_check.h"

#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_identity.h"

namespace downpour {
namespace {

namespace fs = std::filesystem;

// `word` as one word of a POSIX shell command.
std::string Quote(const std::string& word) {
  if (!word.empty() &&
      word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST"
                             "UVWXYZ0123456789-_=./,:+@%") == std::string::npos) {
    return word;
  }
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

bool HasFlag(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 1; i < args.size(); ++i) {
    for (const char* dashes : {"--", "-"}) {
      const std::string f = absl::StrCat(dashes, name);
      if (args[i] == f || absl::StartsWith(args[i], f + "=")) return true;
    }
  }
  return false;
}

}  // namespace

std::string LaunchJobIdentity(const LaunchOptions& o) {
  JobIdentity id;
  id.shards = o.servers;
  id.workers = o.ServerWorkers();
  id.mode = o.mode;
  id.epochs = o.epochs;
  id.batch_size = o.batch_size;
  id.n_push = o.n_push;
  id.dataset = o.dataset;
  id.max_train_examples = o.max_train_examples;
  id.replicas_per_worker = o.ReplicasPerWorker();
  id.local_sum = o.local_aggregation != "none";
  return JobIdentityText(id);
}

absl::StatusOr<std::string> CheckLogDirForResume(const LaunchOptions& o) {
  if (o.log_dir.empty()) {
    if (!o.resume) return std::string();
    return absl::InvalidArgumentError(
        "--resume needs --log_dir, the folder of the run to continue");
  }
  const fs::path ckpt = fs::path(o.log_dir) / "ckpt";
  const std::string here = LaunchJobIdentity(o);
  // Every shard folder's identity ("" for snapshots without a JOB file).
  int shards_found = 0;
  std::string other;  // What differs, for the first shard of another job.
  std::error_code ec;
  for (fs::directory_iterator it(ckpt, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int k = 0;
    if (!it->is_directory() || !absl::StartsWith(name, "shard") ||
        !absl::SimpleAtoi(name.substr(5), &k)) {
      continue;
    }
    if (fs::is_empty(it->path(), ec)) continue;
    ++shards_found;
    absl::StatusOr<std::optional<std::string>> id =
        ReadJobIdentity(it->path().string());
    if (!id.ok()) return absl::FailedPreconditionError(absl::StrCat(
        "--log_dir=", o.log_dir, ": ", id.status().message(),
        "; use a fresh --log_dir"));
    const std::string there = id->value_or("");
    if (other.empty() && there != here) {
      other = there.empty() ? "snapshots without a JOB file"
                            : JobIdentityDifference(there, here);
    }
  }
  if (shards_found == 0) {
    if (!o.resume) return std::string();
    return absl::FailedPreconditionError(absl::StrCat(
        "--resume: nothing to resume in --log_dir=", o.log_dir, " (no snapshots in ",
        ckpt.string(), "); without --resume the job starts from the beginning"));
  }
  if (!other.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--log_dir=", o.log_dir, " holds the snapshots of another job (", other,
        "); use a fresh --log_dir, or that job's flags with --resume to "
        "continue it"));
  }
  if (fs::exists(ckpt / kTrainedMarker, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--log_dir=", o.log_dir,
        " holds a run of this job whose training had finished (it was "
        "stopped while evaluating); nothing to resume: use a fresh --log_dir"));
  }
  if (!o.resume) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--log_dir=", o.log_dir,
        " holds the snapshots of an earlier, unfinished run of this job: "
        "add --resume to continue it, or use a fresh --log_dir to start "
        "anew"));
  }
  int positions = 0;
  for (int i = 0; i < o.workers; ++i) {
    if (fs::exists(ckpt / absl::StrCat("worker", i, ".position"), ec)) {
      ++positions;
    }
  }
  return absl::StrCat("launch: resuming the job in ", o.log_dir,
                      " from the snapshots of ", shards_found,
                      " shards and the data positions of ", positions, " of ",
                      o.workers, " workers");
}

std::string ResumeCommand(const std::vector<std::string>& command_line,
                          const std::string& log_dir) {
  std::vector<std::string> words;
  for (const std::string& w : command_line) words.push_back(Quote(w));
  if (!HasFlag(command_line, "log_dir")) {
    words.push_back(Quote(absl::StrCat("--log_dir=", log_dir)));
  }
  if (!HasFlag(command_line, "resume")) words.push_back("--resume");
  return absl::StrJoin(words, " ");
}

}  // namespace downpour
