#include "server/lbfgs_shard.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {

LbfgsShard::LbfgsShard(int64_t size, int32_t num_workers, LoadFn load,
                       PublishFn publish)
    : size_(size), num_workers_(num_workers), load_(std::move(load)),
      publish_(std::move(publish)) {}

absl::Status LbfgsShard::Accumulate(int64_t eval, int32_t worker,
                                    absl::Span<const float> grad) {
  if (static_cast<int64_t>(grad.size()) != size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulate: ", grad.size(), " values for a shard of ", size_));
  }
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulate: worker ", worker, " is not in [0, ", num_workers_, ")"));
  }
  for (const float v : grad) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError("accumulate: a value is not finite");
    }
  }
  absl::MutexLock l(&mu_);
  if (!loaded_) {
    // Not a late push: this shard lost the job's state.
    return absl::FailedPreconditionError(
        "accumulate: this shard holds no L-BFGS state (it was restarted)");
  }
  if (acc_eval_ < 1 || eval != acc_eval_) {
    return absl::AbortedError(absl::StrCat(
        "accumulate: evaluation ", eval, " is not the open one (",
        acc_eval_ < 1 ? std::string("none") : absl::StrCat(acc_eval_),
        "): a late push of a finished evaluation"));
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
  // Check the whole program against the state each op would meet, so that
  // a refused program changes nothing.
  CheckState state{loaded_, history_, acc_eval_, {}};
  for (const auto& [w, g] : acc_) state.accumulated.insert(w);
  for (size_t i = 0; i < program.size(); ++i) {
    if (absl::Status s = CheckOne(program[i], &state); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("vector program op ", i,
                                                 ": ", s.message()));
    }
  }
  std::vector<double> dots;
  for (const VectorOp& op : program) DP_RETURN_IF_ERROR(RunOne(op, &dots));
  return dots;
}

std::vector<double> LbfgsShard::Get(VecRef v) {
  absl::MutexLock l(&mu_);
  if (!CheckVec(v, history_).ok()) return {};
  return *Vec(v);
}

absl::Status LbfgsShard::CheckVec(VecRef v, int32_t history) const {
  const int32_t kind = static_cast<int32_t>(v.kind);
  if (kind < 0 || kind > kMaxVecKind) {
    return absl::InvalidArgumentError(absl::StrCat("no vector kind ", kind));
  }
  const bool slotted = v.kind == VecKind::kS || v.kind == VecKind::kY;
  if (slotted ? (v.slot < 0 || v.slot >= history) : v.slot != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad slot ", v.slot, " of vector kind ", kind, " (history ", history,
        ")"));
  }
  return absl::OkStatus();
}

absl::Status LbfgsShard::CheckOne(const VectorOp& op, CheckState* st) const {
  using Kind = VectorOp::Kind;
  if (!st->loaded && op.kind != Kind::kLoad) {
    // A shard restarted mid-job lost its vectors: say so rather than
    // compute with zeros.
    return absl::FailedPreconditionError(
        "this shard holds no L-BFGS state (x was never loaded: the shard "
        "was restarted, or the coordinator did not start with a load)");
  }
  if (!std::isfinite(op.alpha)) {
    return absl::InvalidArgumentError("alpha is not finite");
  }
  switch (op.kind) {
    case Kind::kPublish:
      if (publish_ == nullptr) {
        return absl::FailedPreconditionError("no store to publish into");
      }
      return absl::OkStatus();
    case Kind::kLoad:
      if (load_ == nullptr) {
        return absl::FailedPreconditionError("no store to load from");
      }
      if (op.history < 1 || op.history > kMaxHistorySlots) {
        return absl::InvalidArgumentError(absl::StrCat(
            "history ", op.history, " is not in [1, ", kMaxHistorySlots, "]"));
      }
      st->loaded = true;
      st->history = op.history;
      return absl::OkStatus();
    case Kind::kOpen:
      if (op.eval < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("open: evaluation ", op.eval, " < 1"));
      }
      st->open_eval = op.eval;
      st->accumulated.clear();
      return absl::OkStatus();
    case Kind::kGather: {
      DP_RETURN_IF_ERROR(CheckVec(op.a, st->history));
      if (op.eval < 1 || op.eval != st->open_eval) {
        return absl::FailedPreconditionError(absl::StrCat(
            "gather: evaluation ", op.eval, " is not the open one (",
            st->open_eval, ")"));
      }
      std::set<int32_t> seen;
      for (const int32_t w : op.workers) {
        if (w < 0 || w >= num_workers_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "gather: worker ", w, " is not in [0, ", num_workers_, ")"));
        }
        if (!seen.insert(w).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("gather: worker ", w, " named twice"));
        }
        if (st->accumulated.count(w) == 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "gather: no gradient of worker ", w, " for evaluation ",
              op.eval));
        }
      }
      st->accumulated.clear();
      return absl::OkStatus();
    }
    case Kind::kScale:
      return CheckVec(op.a, st->history);
    case Kind::kDot:
    case Kind::kAxpy:
    case Kind::kCopy:
      DP_RETURN_IF_ERROR(CheckVec(op.a, st->history));
      return CheckVec(op.b, st->history);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no vector operation ", static_cast<int>(op.kind)));
}

std::vector<double>* LbfgsShard::Vec(VecRef v) {
  std::vector<double>& vec =
      vecs_[{static_cast<int32_t>(v.kind), v.slot}];
  if (static_cast<int64_t>(vec.size()) != size_) vec.assign(size_, 0.0);
  return &vec;
}

absl::Status LbfgsShard::RunOne(const VectorOp& op, std::vector<double>* dots) {
  using Kind = VectorOp::Kind;
  switch (op.kind) {
    case Kind::kPublish: {
      const std::vector<double>* x = Vec(kVecX);
      std::vector<float> values(x->begin(), x->end());
      return publish_(values);
    }
    case Kind::kLoad: {
      std::vector<float> values(size_);
      DP_RETURN_IF_ERROR(load_(absl::MakeSpan(values)));
      Vec(kVecX)->assign(values.begin(), values.end());
      loaded_ = true;
      history_ = op.history;
      // Slots beyond the history are gone.
      for (auto it = vecs_.begin(); it != vecs_.end();) {
        const bool slotted = it->first.first == static_cast<int32_t>(VecKind::kS) ||
                             it->first.first == static_cast<int32_t>(VecKind::kY);
        it = slotted && it->first.second >= history_ ? vecs_.erase(it)
                                                     : std::next(it);
      }
      return absl::OkStatus();
    }
    case Kind::kOpen:
      acc_eval_ = op.eval;
      acc_.clear();
      return absl::OkStatus();
    case Kind::kGather: {
      std::vector<double>* a = Vec(op.a);
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
      for (double& v : *Vec(op.a)) v *= op.alpha;
      return absl::OkStatus();
    }
    case Kind::kDot:
    case Kind::kAxpy:
    case Kind::kCopy:
      break;
  }
  std::vector<double>* a = Vec(op.a);
  std::vector<double>* b = Vec(op.b);
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
