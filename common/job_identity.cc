#include "common/job_identity.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"

namespace downpour {
namespace {

constexpr char kHeader[] = "downpour job v1";

// "a=1 b=2" as ordered pairs.
std::vector<std::pair<std::string, std::string>> Pairs(absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    pairs.push_back(std::move(kv));
  }
  return pairs;
}

std::string Path(const std::string& dir) {
  return (std::filesystem::path(dir) / kJobFileName).string();
}

}  // namespace

std::string JobIdentityText(const JobIdentity& id) {
  return absl::StrCat(
      "shards=", id.shards, " workers=", id.workers,
      " mode=", TrainModeName(id.mode), " epochs=", id.epochs,
      " batch_size=", id.batch_size, " n_push=", id.n_push,
      " dataset=", DatasetName(id.dataset),
      " max_train_examples=", id.max_train_examples,
      " replicas=", id.replicas_per_worker,
      " local_aggregation=", id.local_sum ? "sum" : "none");
}

std::string JobIdentityDifference(absl::string_view there,
                                  absl::string_view here) {
  const std::vector<std::pair<std::string, std::string>> h = Pairs(here);
  std::map<std::string, std::string> t;
  for (auto& [k, v] : Pairs(there)) t[k] = v;
  std::vector<std::string> diffs;
  for (const auto& [k, v] : h) {
    auto it = t.find(k);
    const std::string old = it == t.end() ? "(none)" : it->second;
    if (old != v) diffs.push_back(absl::StrCat(k, " ", old, " there, ", v, " here"));
    if (it != t.end()) t.erase(it);
  }
  for (const auto& [k, v] : t) {
    diffs.push_back(absl::StrCat(k, " ", v, " there, (none) here"));
  }
  return absl::StrJoin(diffs, "; ");
}

absl::StatusOr<std::optional<std::string>> ReadJobIdentity(
    const std::string& dir) {
  const std::string path = Path(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<std::string>();
  std::ifstream in(path);
  std::string header, identity;
  if (!in || !std::getline(in, header) || header != kHeader ||
      !std::getline(in, identity)) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a readable job file (\"", kHeader,
                     "\" and one line of the job's values)"));
  }
  return std::optional<std::string>(identity);
}

absl::Status ClaimCheckpointDir(const std::string& dir,
                                const std::string& identity) {
  if (absl::Status s = CreatePrivateDirectories(dir); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir, " cannot be created: ", s.message()));
  }
  absl::StatusOr<std::optional<std::string>> found = ReadJobIdentity(dir);
  if (!found.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir, ": ", found.status().message()));
  }
  if (found->has_value() && !identity.empty() && !(*found)->empty() &&
      **found != identity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir, " holds the snapshots of another job (",
        JobIdentityDifference(**found, identity),
        "); give this job a fresh --checkpoint_dir"));
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / kJobFinishedFileName,
                              ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir,
        " holds the snapshots of a job that finished; nothing to resume: "
        "give this job a fresh --checkpoint_dir (or empty that one)"));
  }
  const std::string keep =
      identity.empty() && found->has_value() ? **found : identity;
  if (absl::Status s =
          AtomicWriteFile(Path(dir), absl::StrCat(kHeader, "\n", keep, "\n"));
      !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir, " cannot be written: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status MarkJobFinished(const std::string& dir) {
  absl::Status s = AtomicWriteFile(
      (std::filesystem::path(dir) / kJobFinishedFileName).string(),
      "the job ended; these snapshots resume nothing\n");
  if (s.ok()) return s;
  return absl::UnavailableError(
      absl::StrCat("cannot mark ", dir, " finished: ", s.message()));
}

}  // namespace downpour
