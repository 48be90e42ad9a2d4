#include "worker/shard_incarnations.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"

namespace downpour {

ShardIncarnations::ShardIncarnations(int worker_id, int num_shards, LogFn log)
    : worker_id_(worker_id),
      log_(log != nullptr ? std::move(log) : [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
      }) {
  absl::MutexLock l(&mu_);
  current_.assign(num_shards, 0);
  retired_.resize(num_shards);
}

void ShardIncarnations::Saw(int shard, uint64_t inc) {
  if (inc == 0) return;
  absl::MutexLock l(&mu_);
  uint64_t& known = current_[shard];
  if (known == inc) return;
  std::vector<uint64_t>& retired = retired_[shard];
  if (std::find(retired.begin(), retired.end(), inc) != retired.end()) {
    return;
  }
  if (known != 0) {
    retired.push_back(known);
    ++restarts_seen_;
    // Under the lock, so that the lines come out in the order counted.
    log_(absl::StrFormat(
        "worker %d: shard %d restarted (incarnation %016x -> %016x); "
        "re-pulling its parameters (%d shard restart%s seen)",
        worker_id_, shard, known, inc, restarts_seen_,
        restarts_seen_ == 1 ? "" : "s"));
  }
  known = inc;
}

uint64_t ShardIncarnations::current(int shard) const {
  absl::MutexLock l(&mu_);
  return current_[shard];
}

int64_t ShardIncarnations::restarts_seen() const {
  absl::MutexLock l(&mu_);
  return restarts_seen_;
}

std::vector<int> ShardIncarnations::StaleParts(
    absl::Span<const Part> parts, absl::Span<const uint64_t> part_inc) const {
  std::vector<int> stale;
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < parts.size(); ++i) {
    const uint64_t inc = part_inc[i];
    if (inc != 0 && inc != current_[parts[i].shard]) {
      stale.push_back(static_cast<int>(i));
    }
  }
  return stale;
}

absl::Status ShardIncarnations::ResendStaleParts(
    int64_t seq, absl::Span<const Part> parts,
    const std::vector<uint64_t>* part_inc,
    const std::function<absl::Status(const std::vector<int>&)>& resend) {
  for (int round = 0; round < 3; ++round) {
    const std::vector<int> stale = StaleParts(parts, *part_inc);
    if (stale.empty()) return absl::OkStatus();
    log_(absl::StrFormat(
        "worker %d: %d part(s) of push %d reached a shard's previous process "
        "before it restarted; sending them again",
        worker_id_, stale.size(), seq));
    absl::Status s = resend(stale);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace downpour
