#include "worker/replica_group.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace downpour {

ReplicaGroup::ReplicaGroup(std::vector<Replica> replicas, int64_t n,
                           float local_lr)
    : replicas_(std::move(replicas)),
      n_(n),
      local_lr_(local_lr),
      batches_(replicas_.size()),
      steps_(replicas_.size()) {}

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(
    absl::Span<const Replica> replicas, HostAllocator* alloc, float local_lr) {
  if (replicas.empty()) return absl::InvalidArgumentError("no replicas");
  if (replicas[0].model == nullptr) {
    return absl::InvalidArgumentError(
        "every replica needs a model of the same size and a batcher");
  }
  const int64_t n = replicas[0].model->num_parameters();
  for (const Replica& r : replicas) {
    if (r.model == nullptr || r.batcher == nullptr ||
        r.model->num_parameters() != n) {
      return absl::InvalidArgumentError(
          "every replica needs a model of the same size and a batcher");
    }
  }
  std::unique_ptr<ReplicaGroup> g(new ReplicaGroup(
      std::vector<Replica>(replicas.begin(), replicas.end()), n, local_lr));
  for (const Replica& r : replicas) {
    DP_ASSIGN_OR_RETURN(DeviceBuffer b,
                        DeviceBuffer::Create(r.model->backend(), n));
    g->accrued_.push_back(std::move(b));
  }
  for (size_t r = 1; r < replicas.size(); ++r) {
    DP_ASSIGN_OR_RETURN(HostArray<float> copy,
                        HostArray<float>::Create(alloc, n));
    g->replica_grads_.push_back(std::move(copy));
    g->helpers_.push_back(std::make_unique<JobThread>());
  }
  return g;
}

bool ReplicaGroup::NextBatches() {
  bool exhausted = false;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    batches_[r] = replicas_[r].batcher->Next();
    if (!batches_[r].has_value()) exhausted = true;
  }
  return !exhausted;
}

absl::Status ReplicaGroup::SetParameters(absl::Span<const float> params) {
  for (const Replica& r : replicas_) {
    DP_RETURN_IF_ERROR(r.model->SetParameters(params));
  }
  return absl::OkStatus();
}

absl::Status ReplicaGroup::ComputeOne(int r) {
  Model* m = replicas_[r].model;
  const Batch& b = *batches_[r];
  DP_ASSIGN_OR_RETURN(steps_[r], m->ComputeGradients(b.images.data(),
                                                     b.labels.data(), b.size));
  DP_RETURN_IF_ERROR(
      m->backend()->Axpy(n_, 1.0f, m->gradients(), accrued_[r].data()));
  if (local_lr_ > 0) {
    DP_RETURN_IF_ERROR(
        m->backend()->Axpy(n_, -local_lr_, m->gradients(), m->parameters()));
  }
  return absl::OkStatus();
}

absl::StatusOr<GroupStep> ReplicaGroup::Compute(int64_t step) {
  const int num = size();
  for (int r = 1; r < num; ++r) {
    helpers_[r - 1]->Start([this, r] { return ComputeOne(r); });
  }
  absl::Status first = ComputeOne(0);
  for (int r = 1; r < num; ++r) {
    absl::Status s = helpers_[r - 1]->Wait();
    if (first.ok()) first = s;
  }
  DP_RETURN_IF_ERROR(first);
  DP_ASSIGN_OR_RETURN(GroupStep out, Summarize(step));
  ++accrued_steps_;
  return out;
}

absl::StatusOr<GroupStep> ReplicaGroup::ComputeWithHooks(
    int64_t step, const StepHooks& hooks) {
  if (!CanStream()) {
    return absl::FailedPreconditionError(
        "gradients can leave during the backward pass only with one replica "
        "and no local step");
  }
  const Batch& b = *batches_[0];
  DP_ASSIGN_OR_RETURN(steps_[0],
                      replicas_[0].model->ComputeGradients(
                          b.images.data(), b.labels.data(), b.size, hooks));
  return Summarize(step);
}

absl::Status ReplicaGroup::StartGradientCopy(int64_t begin, int64_t end,
                                             absl::Span<float> out) {
  return replicas_[0].model->StartGradientCopy(begin, end, out);
}

absl::Status ReplicaGroup::WaitGradientCopies() {
  return replicas_[0].model->WaitGradientCopies();
}

float* ReplicaGroup::HostParameters() const {
  Model* const m = replicas_[0].model;
  return m->backend()->HostMemory() ? m->parameters() : nullptr;
}

absl::Status ReplicaGroup::SetParameterRange(absl::Span<const float> params,
                                             int64_t begin, int64_t end) {
  for (const Replica& r : replicas_) {
    DP_RETURN_IF_ERROR(r.model->SetParameterRange(params, begin, end));
  }
  return absl::OkStatus();
}

absl::StatusOr<GroupStep> ReplicaGroup::Summarize(int64_t step) const {
  const int num = size();
  GroupStep out;
  for (int r = 0; r < num; ++r) {
    if (!std::isfinite(steps_[r].loss)) {
      return absl::InternalError(absl::StrFormat(
          "training diverged: loss is %f at step %d (replica %d); lower the "
          "learning rate", steps_[r].loss, step, r));
    }
    out.loss += steps_[r].loss / num;
    out.examples += batches_[r]->size;
  }
  return out;
}

absl::Status ReplicaGroup::TakeMeanGradient(float* out) {
  const int num = size();
  DP_RETURN_IF_ERROR(
      replicas_[0].model->backend()->CopyToHost(accrued_[0].data(), out, n_));
  for (int r = 1; r < num; ++r) {
    DP_RETURN_IF_ERROR(replicas_[r].model->backend()->CopyToHost(
        accrued_[r].data(), replica_grads_[r - 1].data(), n_));
  }
  if (num > 1) {
    const float scale = 1.0f / static_cast<float>(num);
    float* __restrict g = out;
    for (int r = 1; r < num; ++r) {
      const float* __restrict o = replica_grads_[r - 1].data();
      for (int64_t i = 0; i < n_; ++i) g[i] += o[i];
    }
    for (int64_t i = 0; i < n_; ++i) g[i] *= scale;
  }
  for (int r = 0; r < num; ++r) {
    DP_RETURN_IF_ERROR(
        replicas_[r].model->backend()->Fill(accrued_[r].data(), n_, 0.0f));
  }
  accrued_steps_ = 0;
  return absl::OkStatus();
}

}  // namespace downpour
