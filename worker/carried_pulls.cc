#include "worker/carried_pulls.h"

#include <utility>

#include "common/status_macros.h"

namespace downpour {

CarriedPulls::CarriedPulls(int shards)
    : jobs_(shards), state_(shards), running_(shards, false) {}

CarriedPulls::~CarriedPulls() { Wait().IgnoreError(); }

CarriedPull* CarriedPulls::Prepare(int shard, int parts) {
  if (state_[shard] == nullptr) state_[shard] = std::make_unique<CarriedPull>();
  CarriedPull* c = state_[shard].get();
  c->part = -1;
  c->incarnation = 0;
  c->options = PullOptions();
  c->req.assign(parts, grpc::ByteBuffer());
  c->resp.assign(parts, grpc::ByteBuffer());
  c->read_as.assign(parts, Part());
  c->answered_by.assign(parts, 0);
  return c;
}

void CarriedPulls::Start(int shard,
                         std::function<absl::Status(CarriedPull*)> call) {
  if (jobs_[shard] == nullptr) jobs_[shard] = std::make_unique<JobThread>();
  CarriedPull* c = state_[shard].get();
  running_[shard] = true;
  jobs_[shard]->Start([c, call = std::move(call)] { return call(c); });
}

absl::Status CarriedPulls::Wait(
    const std::function<void(int, const CarriedPull&)>& done) {
  absl::Status first;
  for (size_t s = 0; s < jobs_.size(); ++s) {
    if (!running_[s]) continue;
    running_[s] = false;
    const absl::Status st = jobs_[s]->Wait();
    if (!st.ok()) {
      first.Update(st);
      continue;
    }
    if (done) done(static_cast<int>(s), *state_[s]);
  }
  return first;
}

bool CarriedPull::Brought(int k, const std::vector<int64_t>& versions) const {
  if (answered_by[k] != incarnation) return false;
  for (int32_t id : read_as[k].chunk_ids) {
    if (versions[id] < options.min_version) return false;
  }
  return true;
}

std::function<absl::Status(int)> ReadThenTell(
    std::function<absl::Status(int)> read, std::function<bool(int)> good,
    const std::vector<Part>* read_as, const PullOptions* options) {
  return [=](int k) {
    DP_RETURN_IF_ERROR(read(k));
    if (good(k) && options->on_chunks) options->on_chunks((*read_as)[k].chunk_ids);
    return absl::OkStatus();
  };
}

}  // namespace downpour
