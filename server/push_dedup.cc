#include "server/push_dedup.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

PushDedupTable::Worker* PushDedupTable::GetWorker(int32_t worker_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Worker>& w = workers_[worker_id];
  if (w == nullptr) w = std::make_unique<Worker>();
  return w.get();
}

absl::StatusOr<PushClaim> PushDedupTable::Claim(const PushId& id) {
  Worker* worker = GetWorker(id.worker_id);
  absl::MutexLock l(&worker->mu);
  PushClaim claim;
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

}  // namespace downpour
