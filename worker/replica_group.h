// File: worker/replica_group.h
//
// Several model replicas (one per GPU of a host, say) acting as one worker:
// each computes a gradient on its own batches from the same parameters, in
// parallel (replica 0 on the calling thread, the others on a JobThread each),
// accrues it in device memory, and the group hands the mean over replicas of
// the accrued gradients to the exchange (BytePS-style local aggregation; the
// sum runs on the host over the gradients each replica copies out for the
// push anyway). With one replica the group adds no threads and no copies.
//
// Usage (the Downpour loop):
//   DP_ASSIGN_OR_RETURN(auto group, ReplicaGroup::Create(replicas, alloc, 0));
//   DP_RETURN_IF_ERROR(group->SetParameters(params));
//   while (group->NextBatches()) {
//     DP_ASSIGN_OR_RETURN(GroupStep s, group->Compute(step));
//     ... DP_RETURN_IF_ERROR(group->TakeMeanGradient(host_grads));
//   }
//
// Thread-safety: one thread calls every method. Ownership: the models and
// batchers are borrowed and must outlive the group; the group owns the
// accrued-gradient buffers, the host copy-out buffers and the helper threads.
#ifndef DOWNPOUR_WORKER_REPLICA_GROUP_H_
#define DOWNPOUR_WORKER_REPLICA_GROUP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/host_allocator.h"
#include "worker/data/data.h"
#include "worker/job_thread.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"

namespace downpour {

// One model replica and its input.
struct Replica {
  Model* model = nullptr;      // Not owned.
  Batcher* batcher = nullptr;  // Not owned.
};

// What one step of the whole group did.
struct GroupStep {
  float loss = 0;    // Mean over replicas of their batch losses.
  int examples = 0;  // Summed over replicas.
};

class ReplicaGroup {
 public:
  // Every replica needs a model (all of the same size) and a batcher.
  // `local_lr` > 0: after each gradient, each replica also takes its own SGD
  // step (parameters -= local_lr * gradient). Host buffers come from `alloc`.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(
      absl::Span<const Replica> replicas, HostAllocator* alloc,
      float local_lr);

  int size() const { return static_cast<int>(replicas_.size()); }
  int64_t num_parameters() const { return n_; }
  // The replicas' parameter tensors, in flat order.
  const std::vector<TensorSpec>& param_specs() const {
    return replicas_[0].model->param_specs();
  }

  // Takes the next batch of every replica; false when any batcher is
  // exhausted.
  bool NextBatches();
  // The epoch of replica 0's current batch. Precondition: NextBatches() was
  // true.
  int epoch() const { return batches_[0]->epoch; }

  // Copies `params` (num_parameters() floats) into every replica.
  absl::Status SetParameters(absl::Span<const float> params);

  // Every replica's step on its current batch, in parallel; the gradients
  // accrue. `step` (steps completed so far) only names a diverged step: a
  // non-finite loss is an Internal error.
  absl::StatusOr<GroupStep> Compute(int64_t step);

  // Wait-free backpropagation (exchange.h) needs the step's gradient to be
  // the model's own: one replica, no local step.
  bool CanStream() const { return replicas_.size() == 1 && local_lr_ == 0; }
  // Precondition: CanStream(). Replica 0's step with `hooks` between its
  // layers (model.h); its gradient stays in the model, where
  // StartGradientCopy reads it, and nothing accrues.
  absl::StatusOr<GroupStep> ComputeWithHooks(int64_t step,
                                             const StepHooks& hooks);
  // Starts copying replica 0's gradients [begin, end) into the same range
  // of `out` (num_parameters() floats) without waiting for the device
  // (Model::StartGradientCopy); WaitGradientCopies waits, and may be called
  // from another thread.
  absl::Status StartGradientCopy(int64_t begin, int64_t end,
                                 absl::Span<float> out);
  absl::Status WaitGradientCopies();
  // Precondition: CanStream(). Replica 0's parameter memory when the host
  // may write it directly (Backend::HostMemory), else null. Values written
  // there count once SetParameterRange is given this memory for the range.
  float* HostParameters() const;
  // params[begin, end) (params: num_parameters() floats) into every replica.
  absl::Status SetParameterRange(absl::Span<const float> params,
                                 int64_t begin, int64_t end);

  // Steps accrued since the last TakeMeanGradient.
  int64_t accrued_steps() const { return accrued_steps_; }

  // Writes the mean over replicas of the accrued gradients to `out`
  // (num_parameters() floats of host memory) and zeroes the accruals.
  absl::Status TakeMeanGradient(float* out);

 private:
  ReplicaGroup(std::vector<Replica> replicas, int64_t n, float local_lr);
  absl::Status ComputeOne(int r);
  // The group's step from steps_ (a non-finite loss is an error).
  absl::StatusOr<GroupStep> Summarize(int64_t step) const;

  const std::vector<Replica> replicas_;
  const int64_t n_;
  const float local_lr_;
  std::vector<DeviceBuffer> accrued_;            // One per replica.
  std::vector<HostArray<float>> replica_grads_;  // Replicas 1.. copy out here.
  std::vector<std::optional<Batch>> batches_;    // The current batches.
  std::vector<StepResult> steps_;                // Their results.
  int64_t accrued_steps_ = 0;
  // Last: destroyed first, so no job outlives the buffers above.
  std::vector<std::unique_ptr<JobThread>> helpers_;  // Replicas 1..
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_REPLICA_GROUP_H_
