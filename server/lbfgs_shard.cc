#include "server/lbfgs_shard.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {

LbfgsShard::LbfgsShard(int64_t size, LoadFn load, PublishFn publish)
    : size_(size), load_(std::move(load)), publish_(std::move(publish)) {}

absl::Status LbfgsShard::Accumulate(int64_t eval, int32_t worker,
                                    absl::Span<const float> grad) {
  if (static_cast<int64_t>(grad.size()) != size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulate: ", grad.size(), " values for a shard of ", size_));
  }
  if (worker < 0) return absl::InvalidArgumentError("accumulate: worker < 0");
  for (const float v : grad) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError("accumulate: a value is not finite");
    }
  }
  absl::MutexLock l(&mu_);
  if (eval < acc_eval_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "accumulate: evaluation ", eval, " is over (now ", acc_eval_, ")"));
  }
  if (eval > acc_eval_) {
    acc_.clear();
    acc_eval_ = eval;
  }
  std::vector<float>& acc = acc_[worker];
  if (acc.empty()) {
    acc.assign(grad.begin(), grad.end());
  } else {
    for (int64_t i = 0; i < size_; ++i) acc[i] += grad[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> LbfgsShard::Run(
    absl::Span<const VectorOp> program) {
  absl::MutexLock l(&mu_);
  std::vector<double> dots;
  for (const VectorOp& op : program) {
    if (!loaded_ && op.kind != VectorOp::Kind::kLoad) {
      // A shard restarted mid-job lost its vectors: say so rather than
      // compute with zeros.
      return absl::FailedPreconditionError(
          "this shard holds no L-BFGS state (x was never loaded: the shard "
          "was restarted, or the coordinator did not start with a load)");
    }
    DP_RETURN_IF_ERROR(RunOne(op, &dots));
  }
  return dots;
}

std::vector<double> LbfgsShard::Get(VecRef v) {
  absl::MutexLock l(&mu_);
  absl::StatusOr<std::vector<double>*> p = Vec(v);
  return p.ok() ? **p : std::vector<double>();
}

absl::StatusOr<std::vector<double>*> LbfgsShard::Vec(VecRef v) {
  const int32_t kind = static_cast<int32_t>(v.kind);
  if (kind < 0 || kind > kMaxVecKind) {
    return absl::InvalidArgumentError(absl::StrCat("no vector kind ", kind));
  }
  const bool slotted = v.kind == VecKind::kS || v.kind == VecKind::kY;
  if (slotted ? (v.slot < 0 || v.slot >= kMaxHistorySlots) : v.slot != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad slot ", v.slot, " of vector kind ", kind));
  }
  std::vector<double>& vec = vecs_[{kind, v.slot}];
  if (static_cast<int64_t>(vec.size()) != size_) vec.assign(size_, 0.0);
  return &vec;
}

absl::Status LbfgsShard::RunOne(const VectorOp& op, std::vector<double>* dots) {
  using Kind = VectorOp::Kind;
  switch (op.kind) {
    case Kind::kPublish: {
      if (publish_ == nullptr) {
        return absl::FailedPreconditionError("no store to publish into");
      }
      DP_ASSIGN_OR_RETURN(std::vector<double>* x, Vec(kVecX));
      std::vector<float> values(x->begin(), x->end());
      return publish_(values);
    }
    case Kind::kLoad: {
      if (load_ == nullptr) {
        return absl::FailedPreconditionError("no store to load from");
      }
      std::vector<float> values(size_);
      DP_RETURN_IF_ERROR(load_(absl::MakeSpan(values)));
      DP_ASSIGN_OR_RETURN(std::vector<double>* x, Vec(kVecX));
      x->assign(values.begin(), values.end());
      loaded_ = true;
      return absl::OkStatus();
    }
    case Kind::kGather: {
      if (op.eval != acc_eval_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "gather: evaluation ", op.eval, " is not the one accumulated (",
            acc_eval_, ")"));
      }
      for (const int32_t w : op.workers) {
        if (acc_.count(w) == 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "gather: no gradient of worker ", w, " for evaluation ",
              op.eval));
        }
      }
      DP_ASSIGN_OR_RETURN(std::vector<double>* a, Vec(op.a));
      std::fill(a->begin(), a->end(), 0.0);
      for (const int32_t w : op.workers) {
        const std::vector<float>& g = acc_[w];
        for (int64_t i = 0; i < size_; ++i) (*a)[i] += g[i];
      }
      for (double& v : *a) v *= op.alpha;
      acc_.clear();
      return absl::OkStatus();
    }
    case Kind::kScale: {
      DP_ASSIGN_OR_RETURN(std::vector<double>* a, Vec(op.a));
      for (double& v : *a) v *= op.alpha;
      return absl::OkStatus();
    }
    case Kind::kDot:
    case Kind::kAxpy:
    case Kind::kCopy:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no vector operation ", static_cast<int>(op.kind)));
  }
  DP_ASSIGN_OR_RETURN(std::vector<double>* a, Vec(op.a));
  DP_ASSIGN_OR_RETURN(std::vector<double>* b, Vec(op.b));
  if (op.kind == Kind::kDot) {
    double sum = 0;
    for (int64_t i = 0; i < size_; ++i) sum += (*a)[i] * (*b)[i];
    dots->push_back(sum);
  } else if (op.kind == Kind::kAxpy) {
    for (int64_t i = 0; i < size_; ++i) (*a)[i] += op.alpha * (*b)[i];
  } else if (a != b) {
    *a = *b;
  }
  return absl::OkStatus();
}

}  // namespace downpour
