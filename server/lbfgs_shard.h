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
//   LbfgsShard shard(n, num_workers, load, publish);
//   shard.Run({VectorOp::Load(m)});                    // the coordinator
//   shard.Run({VectorOp::Open(eval)});                 // the coordinator
//   shard.Accumulate(eval, worker, grad_slice);        // each worker
//   DP_ASSIGN_OR_RETURN(auto dots, shard.Run(program));
//
// A bad request is refused whole with a status and changes nothing: a
// program is checked op by op against the state it would meet before any
// of it runs. What it keeps is bounded by the job: one accumulation per
// worker id below num_workers, and 5 + 2m vectors for a history of m.
//
// Thread-safety: every method may be called concurrently (one lock; a
// program runs under it). Vectors are double precision, so that dot
// products over a large shard keep their digits.
#ifndef DOWNPOUR_SERVER_LBFGS_SHARD_H_
#define DOWNPOUR_SERVER_LBFGS_SHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
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

  // `size`: the shard's elements; `num_workers`: the job's workers (ids
  // 0..num_workers-1). load/publish may be null (kLoad and kPublish are
  // then FailedPrecondition).
  LbfgsShard(int64_t size, int32_t num_workers, LoadFn load,
             PublishFn publish);

  int64_t size() const { return size_; }

  // Adds a worker's summed gradient of evaluation `eval` (size floats,
  // finite; worker in [0, num_workers)): InvalidArgument otherwise;
  // FailedPrecondition before x was loaded (a restarted shard). Only
  // the evaluation the coordinator opened (kOpen) is taken: any other is
  // Aborted (a late push of a finished evaluation, which its worker drops),
  // a code no other failure here uses. A second push of one worker for
  // one eval adds to the first (a worker that won more portions after
  // pushing pushes again).
  absl::Status Accumulate(int64_t eval, int32_t worker,
                          absl::Span<const float> grad)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs the program in order and returns its dot products in order. The
  // whole program is checked first and nothing of a refused one runs:
  // FailedPrecondition when x was never loaded and the program does not
  // start with kLoad (a shard restarted mid-job has lost its vectors), for
  // a gather of an evaluation that is not the open one or of a worker with
  // no accumulation, and for kLoad / kPublish without a store;
  // InvalidArgument for an unknown operation or vector, a slot at or
  // above the history, a scalar that is not finite, a worker outside
  // [0, num_workers) or named twice in one gather, a history outside
  // [1, kMaxHistorySlots], an eval < 1 to open. Only a failure of the
  // store itself (load or publish) stops a checked program part way.
  absl::StatusOr<std::vector<double>> Run(absl::Span<const VectorOp> program)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A copy of one vector (tests).
  std::vector<double> Get(VecRef v) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What a program changes of the state its checks depend on.
  struct CheckState {
    bool loaded;
    int32_t history;
    int64_t open_eval;
    std::set<int32_t> accumulated;
  };
  absl::Status CheckVec(VecRef v, int32_t history) const;
  absl::Status CheckOne(const VectorOp& op, CheckState* state) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The vector (allocated, zero, on first use); `v` was checked.
  std::vector<double>* Vec(VecRef v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunOne(const VectorOp& op, std::vector<double>* dots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t size_;
  const int32_t num_workers_;
  const LoadFn load_;
  const PublishFn publish_;
  absl::Mutex mu_;
  // The named vectors by (kind, slot), allocated (zero) on first use.
  std::map<std::pair<int32_t, int32_t>, std::vector<double>> vecs_
      ABSL_GUARDED_BY(mu_);
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  int32_t history_ ABSL_GUARDED_BY(mu_) = kMaxHistorySlots;
  int64_t acc_eval_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none open.
  std::map<int32_t, std::vector<float>> acc_ ABSL_GUARDED_BY(mu_);
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_LBFGS_SHARD_H_
