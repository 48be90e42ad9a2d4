// File: server/lbfgs_shard.h
//
// One shard's side of Sandblaster L-BFGS (Dean et al. 2012), with no RPC in
// it: the shard's slices of the parameters x, the gradient g, the search
// direction d, the line search's base point and trial gradient, and the m
// most recent (s, y) pairs; the workers' accumulated gradients of the
// evaluation under way, one per worker; and the programs of vector
// operations (common/vector_program.h) the coordinator sends, of which only
// the dot products go back. So an L-BFGS iteration moves O(m) scalars per
// shard to the coordinator, never the vectors.
//
// The shard's slice is its chunks concatenated in local order (the shard
// map's list for the shard, server/chunk_storage.h's ShardChunks order), of
// `size` floats. Where the served values live is the caller's: `load` reads
// them into x (kLoad) and `publish` writes x there (kPublish), so that
// pulls serve the current point.
//
//   LbfgsShard shard(n, load, publish);
//   shard.Accumulate(eval, worker, grad_slice);        // each worker, once
//   DP_ASSIGN_OR_RETURN(auto dots, shard.Run(program));
//
// Thread-safety: every method may be called concurrently (one lock; a
// program runs under it). Vectors are double precision, so that dot
// products over a large shard keep their digits.
#ifndef DOWNPOUR_SERVER_LBFGS_SHARD_H_
#define DOWNPOUR_SERVER_LBFGS_SHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/vector_program.h"

namespace downpour {

class LbfgsShard {
 public:
  // Reads the served values (size floats) into the span; writes x as the
  // served values.
  using LoadFn = std::function<absl::Status(absl::Span<float>)>;
  using PublishFn = std::function<absl::Status(absl::Span<const float>)>;

  // `size`: the shard's elements. load/publish may be null (kLoad and
  // kPublish are then FailedPrecondition).
  LbfgsShard(int64_t size, LoadFn load, PublishFn publish);

  int64_t size() const { return size_; }

  // Adds a worker's summed gradient of evaluation `eval` (size floats,
  // finite). A newer eval than any seen drops the older accumulations; an
  // older one is FailedPrecondition (a late push of a finished evaluation).
  // A second push of one worker for one eval adds to the first (a worker
  // that won more portions after pushing pushes again).
  absl::Status Accumulate(int64_t eval, int32_t worker,
                          absl::Span<const float> grad)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs the program in order and returns its dot products in order.
  // Every program before the first kLoad is FailedPrecondition (a shard
  // restarted mid-job has lost its vectors). InvalidArgument for a bad vector or slot (nothing after it runs;
  // operations before it stay done); FailedPrecondition for a gather of a
  // worker with no accumulation for that eval.
  absl::StatusOr<std::vector<double>> Run(absl::Span<const VectorOp> program)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A copy of one vector (tests).
  std::vector<double> Get(VecRef v) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::StatusOr<std::vector<double>*> Vec(VecRef v)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunOne(const VectorOp& op, std::vector<double>* dots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t size_;
  const LoadFn load_;
  const PublishFn publish_;
  absl::Mutex mu_;
  // The named vectors by (kind, slot), allocated (zero) on first use.
  std::map<std::pair<int32_t, int32_t>, std::vector<double>> vecs_
      ABSL_GUARDED_BY(mu_);
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  int64_t acc_eval_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<int32_t, std::vector<float>> acc_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_LBFGS_SHARD_H_
