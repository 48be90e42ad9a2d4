// File: worker/carried_pulls.h
//
// The carried pulls of a sync push under way. A shard's last part of a
// sync push may go as a PushPull whose reply waits for the step and brings
// the shard's new values (ParameterClient::PushFromCarryingPulls). Its call
// runs on a thread of the shard's own while the worker sends the rest of
// the push: a shard's step never waits for another shard's (with a dead
// worker, the step of one shard takes its timeout while the others' must
// still get this worker's parts in time). The push's end waits for them.
//
//   CarriedPulls carried(num_shards);
//   CarriedPull* c = carried.Prepare(shard, parts);  // fill its request...
//   carried.Start(shard, [&](CarriedPull* c) { return Call(c); });
//   ...                                        // the push goes on
//   DP_RETURN_IF_ERROR(carried.Wait([&](int shard, const CarriedPull& c) {
//     ...                                      // what the reply said
//   }));
//
// Thread-safety: one thread calls every method; each call's job runs on its
// shard's thread and touches only its CarriedPull and what the job refers
// to. The destructor waits for the calls under way.
#ifndef DOWNPOUR_WORKER_CARRIED_PULLS_H_
#define DOWNPOUR_WORKER_CARRIED_PULLS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "worker/job_thread.h"
#include "worker/part_messages.h"
#include "worker/part_plan.h"
#include "worker/ps_client.h"

namespace downpour {

// One shard's carried call: its own copies of everything it needs after the
// caller has moved on.
struct CarriedPull {
  int part = -1;             // The part it carries (an index into the push's).
  uint64_t incarnation = 0;  // The shard's, as last seen when it left.
  PullOptions options;       // What the pull waits for, and on_chunks.
  // Sized to the push's parts; [part] used: the request, its reply, the
  // pull part the reply is read as, the incarnation that answered.
  std::vector<grpc::ByteBuffer> req, resp;
  std::vector<Part> read_as;
  std::vector<uint64_t> answered_by;
  // The request's header bytes live here until the call ended (another
  // shard's carried call in the same push has its own).
  PushEncoder encoder;

  // Whether call k's reply brought the shard's values at the step asked
  // for, from the incarnation it left to (versions: as read so far).
  bool Brought(int k, const std::vector<int64_t>& versions) const;
};

class CarriedPulls {
 public:
  explicit CarriedPulls(int shards);
  ~CarriedPulls();
  CarriedPulls(const CarriedPulls&) = delete;
  CarriedPulls& operator=(const CarriedPulls&) = delete;

  // Shard `shard`'s call state, reset for `parts` parts; precondition: its
  // call is not under way.
  CarriedPull* Prepare(int shard, int parts);
  // Runs call(state) on the shard's thread.
  void Start(int shard, std::function<absl::Status(CarriedPull*)> call);
  bool running(int shard) const { return running_[shard]; }
  // Waits for every call under way, then tells done(shard, state) of each
  // that succeeded; the first failure's status (after all ended).
  absl::Status Wait(
      const std::function<void(int, const CarriedPull&)>& done = nullptr);

 private:
  std::vector<std::unique_ptr<JobThread>> jobs_;  // Made on first use.
  std::vector<std::unique_ptr<CarriedPull>> state_;
  std::vector<bool> running_;
};

// An on_ok that reads call k's reply (read), then tells options->on_chunks
// of the chunks of (*read_as)[k] when good(k): they came at the step asked
// for.
std::function<absl::Status(int)> ReadThenTell(
    std::function<absl::Status(int)> read, std::function<bool(int)> good,
    const std::vector<Part>* read_as, const PullOptions* options);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_CARRIED_PULLS_H_
