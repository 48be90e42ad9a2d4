#include "worker/sandblaster_lbfgs.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace downpour {

LbfgsDriver::LbfgsDriver(LbfgsOptions options, ShardVectorOps* ops,
                         Objective* objective)
    : options_(std::move(options)), ops_(ops), objective_(objective) {}

absl::StatusOr<double> LbfgsDriver::Dot(VecRef a, VecRef b) {
  DP_ASSIGN_OR_RETURN(std::vector<double> d, ops_->Run({VectorOp::Dot(a, b)}));
  return d.at(0);
}

int32_t LbfgsDriver::NextSlot() const {
  const int32_t slots = std::max(1, options_.history);
  if (history_.empty()) return 0;
  return (history_.back().slot + 1) % slots;
}

absl::StatusOr<bool> LbfgsDriver::PushPair(double sy, double yy,
                                           int32_t slot) {
  if (!(sy > 1e-10 * yy) || !(yy > 0) || !std::isfinite(sy)) return false;
  if (static_cast<int>(history_.size()) >= std::max(1, options_.history)) {
    history_.pop_front();
  }
  history_.push_back({slot, 1.0 / sy, sy / yy});
  return true;
}

absl::StatusOr<double> LbfgsDriver::Direction() {
  // q = g; for newest to oldest: a_i = rho_i s_i.q, q -= a_i y_i. Each
  // round sends the previous update and the next dot product together.
  std::vector<double> alpha(history_.size());
  std::vector<VectorOp> pending = {VectorOp::Copy(kVecD, kVecG)};
  for (int i = static_cast<int>(history_.size()) - 1; i >= 0; --i) {
    const Pair& p = history_[i];
    pending.push_back(VectorOp::Dot(S(p.slot), kVecD));
    DP_ASSIGN_OR_RETURN(std::vector<double> d, ops_->Run(pending));
    alpha[i] = p.rho * d.at(0);
    pending = {VectorOp::Axpy(kVecD, -alpha[i], Y(p.slot))};
  }
  // r = gamma q; for oldest to newest: b = rho_i y_i.r, r += (a_i - b) s_i.
  if (!history_.empty()) {
    pending.push_back(VectorOp::Scale(kVecD, history_.back().gamma));
  }
  for (size_t i = 0; i < history_.size(); ++i) {
    const Pair& p = history_[i];
    pending.push_back(VectorOp::Dot(Y(p.slot), kVecD));
    DP_ASSIGN_OR_RETURN(std::vector<double> d, ops_->Run(pending));
    const double beta = p.rho * d.at(0);
    pending = {VectorOp::Axpy(kVecD, alpha[i] - beta, S(p.slot))};
  }
  pending.push_back(VectorOp::Scale(kVecD, -1.0));
  pending.push_back(VectorOp::Dot(kVecG, kVecD));
  DP_ASSIGN_OR_RETURN(std::vector<double> d, ops_->Run(pending));
  return d.at(0);
}

absl::StatusOr<LbfgsResult> LbfgsDriver::Run() {
  LbfgsResult r;
  // The shards keep as many (s, y) slots as the history uses.
  DP_RETURN_IF_ERROR(
      ops_->Run({VectorOp::Load(std::max(1, options_.history))}).status());
  int64_t examples = 0;
  DP_ASSIGN_OR_RETURN(double f, objective_->Evaluate(0, kVecG, &examples));
  ++r.evaluations;
  r.examples += examples;
  const auto over = [&] {
    if (options_.max_examples > 0 && r.examples >= options_.max_examples) {
      return true;
    }
    if (options_.max_iterations > 0 &&
        r.iterations >= options_.max_iterations) {
      return true;
    }
    return options_.stop != nullptr && options_.stop();
  };
  for (int64_t k = 0; !over(); ++k) {
    DP_ASSIGN_OR_RETURN(double gd, Direction());
    if (!(gd < 0)) {  // Not a descent direction: steepest descent.
      history_.clear();
      ++r.history_resets;
      DP_ASSIGN_OR_RETURN(gd, Direction());
    }
    double t = 1.0;
    if (history_.empty()) {
      DP_ASSIGN_OR_RETURN(const double gg, Dot(kVecG, kVecG));
      t = std::min(1.0, 1.0 / std::max(std::sqrt(gg), 1e-12));
    }
    DP_RETURN_IF_ERROR(ops_->Run({VectorOp::Copy(kVecXBase, kVecX)}).status());
    bool accepted = false;
    double f_t = 0;
    for (int ls = 0; ls < options_.max_line_search; ++ls) {
      DP_RETURN_IF_ERROR(ops_->Run({VectorOp::Copy(kVecX, kVecXBase),
                                    VectorOp::Axpy(kVecX, t, kVecD),
                                    VectorOp::Publish()})
                             .status());
      DP_ASSIGN_OR_RETURN(f_t, objective_->Evaluate(k, kVecGTrial, &examples));
      ++r.evaluations;
      ++r.line_search_evaluations;
      r.examples += examples;
      if (std::isfinite(f_t) && f_t <= f + options_.armijo_c1 * t * gd) {
        accepted = true;
        break;
      }
      // The minimum of the quadratic through f, g.d and f_t, kept within
      // [0.1 t, 0.5 t].
      double next = 0.5 * t;
      if (std::isfinite(f_t)) {
        const double denom = 2.0 * (f_t - f - gd * t);
        if (denom > 0) next = -gd * t * t / denom;
      }
      t = std::clamp(next, 0.1 * t, 0.5 * t);
    }
    if (accepted) {
      const int32_t slot = NextSlot();
      DP_ASSIGN_OR_RETURN(
          std::vector<double> d,
          ops_->Run({VectorOp::Copy(S(slot), kVecD), VectorOp::Scale(S(slot), t),
                     VectorOp::Copy(Y(slot), kVecGTrial),
                     VectorOp::Axpy(Y(slot), -1.0, kVecG),
                     VectorOp::Dot(S(slot), Y(slot)),
                     VectorOp::Dot(Y(slot), Y(slot))}));
      // A slot being reused is dropped from the history first.
      if (!history_.empty() && history_.front().slot == slot &&
          static_cast<int>(history_.size()) >= options_.history) {
        history_.pop_front();
      }
      DP_ASSIGN_OR_RETURN(const bool kept, PushPair(d.at(0), d.at(1), slot));
      (void)kept;
      f = f_t;
    } else {  // No decrease along d: back to the base point, no history.
      DP_RETURN_IF_ERROR(ops_->Run({VectorOp::Copy(kVecX, kVecXBase),
                                    VectorOp::Publish()})
                             .status());
      history_.clear();
      ++r.history_resets;
    }
    ++r.iterations;
    if (options_.on_iteration) options_.on_iteration(k, f);
    if (over()) break;
    if (accepted && objective_->SameBatch(k)) {
      DP_RETURN_IF_ERROR(ops_->Run({VectorOp::Copy(kVecG, kVecGTrial)}).status());
    } else {
      DP_ASSIGN_OR_RETURN(f, objective_->Evaluate(k + 1, kVecG, &examples));
      ++r.evaluations;
      r.examples += examples;
    }
  }
  r.final_loss = f;
  return r;
}

}  // namespace downpour
