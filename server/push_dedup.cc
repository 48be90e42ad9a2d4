#include "server/push_dedup.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

PushDedupTable::Worker* PushDedupTable::GetWorker(int32_t worker_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Worker>& w = workers_[worker_id];
  if (w == nullptr) w = std::make_unique<Worker>();
  return w.get();
}

absl::Status PushDedupTable::SwitchIncarnationLocked(const PushId& id,
                                                     Worker* w) {
  if (std::find(w->retired.begin(), w->retired.end(), id.incarnation) !=
      w->retired.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push from worker ", id.worker_id, " incarnation ", id.incarnation,
        ", which a newer process with the same worker id (incarnation ",
        w->incarnation,
        ") replaced; two processes must not share a worker index"));
  }
  w->retired.push_back(w->incarnation);
  if (w->retired.size() > kMaxRetired) w->retired.erase(w->retired.begin());
  w->incarnation = id.incarnation;
  w->seq = 0;
  w->num_parts = 1;
  w->parts_done = 0;
  w->parts.clear();
  return absl::OkStatus();
}

absl::StatusOr<PushClaim> PushDedupTable::Claim(const PushId& id) {
  Worker* worker = GetWorker(id.worker_id);
  absl::MutexLock l(&worker->mu);
  PushClaim claim;
  // A worker's seq grows by one a push; after a shard's restore the workers
  // may be ahead of it by the pushes the snapshot missed. A far larger jump
  // would make every later push of the real worker a "duplicate". Checked
  // before anything changes.
  const bool starts = (worker->seq == 0 && worker->retired.empty()) ||
                      id.incarnation != worker->incarnation;
  const int64_t last = starts ? 0 : worker->seq;
  const int64_t max_jump = last == 0 ? kMaxFirstSeq : kMaxSeqJump;
  if (id.seq - last > max_jump) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push seq ", id.seq, " of worker ", id.worker_id, " is more than ",
        max_jump, " beyond its last (", last, ")"));
  }
  if (worker->seq == 0 && worker->retired.empty()) {
    worker->incarnation = id.incarnation;  // The worker's first push.
  } else if (id.incarnation != worker->incarnation) {
    absl::Status s = SwitchIncarnationLocked(id, worker);
    if (!s.ok()) return s;
    claim.new_incarnation = true;
  }
  if (id.seq < worker->seq ||
      (id.seq == worker->seq && worker->parts[id.part])) {
    claim.duplicate = true;
    return claim;
  }
  if (id.seq == worker->seq && id.num_parts != worker->num_parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push seq ", id.seq, " part ", id.part, " says ", id.num_parts,
        " parts, an earlier part said ", worker->num_parts));
  }
  if (id.seq > worker->seq) {
    worker->seq = id.seq;
    worker->num_parts = id.num_parts;
    worker->parts_done = 0;
    worker->parts.assign(id.num_parts, false);
  }
  worker->parts[id.part] = true;
  claim.completes_push = ++worker->parts_done == worker->num_parts;
  return claim;
}

std::vector<DedupEntry> PushDedupTable::Export() const {
  std::vector<DedupEntry> out;
  absl::MutexLock l(&mu_);
  for (const auto& [id, w] : workers_) {
    absl::MutexLock wl(&w->mu);
    DedupEntry e;
    e.worker_id = id;
    e.incarnation = w->incarnation;
    e.seq = w->seq;
    e.num_parts = w->num_parts;
    e.parts = w->parts;
    e.retired = w->retired;
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status PushDedupTable::Import(const std::vector<DedupEntry>& entries) {
  for (const DedupEntry& e : entries) {
    if (e.worker_id < 0 || e.seq < 0 || e.num_parts < 1 ||
        (e.seq > 0 && e.parts.size() != static_cast<size_t>(e.num_parts))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dedup entry of worker ", e.worker_id, " is inconsistent (seq ",
          e.seq, ", ", e.parts.size(), " of ", e.num_parts, " parts)"));
    }
  }
  for (const DedupEntry& e : entries) {
    Worker* w = GetWorker(e.worker_id);
    absl::MutexLock l(&w->mu);
    w->incarnation = e.incarnation;
    w->retired = e.retired;
    w->seq = e.seq;
    w->num_parts = e.num_parts;
    w->parts = e.parts;
    w->parts_done = static_cast<int32_t>(
        std::count(e.parts.begin(), e.parts.end(), true));
  }
  return absl::OkStatus();
}

}  // namespace downpour
