#include "worker/sandblaster_portions.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace downpour {

PortionTable::PortionTable(PortionTableOptions options)
    : options_(std::move(options)) {}

bool PortionTable::AllResultsIn() const {
  for (const Slot& s : slots_) {
    if (s.winner < 0) return false;
  }
  return true;
}

int32_t PortionTable::Holders(int32_t portion) const {
  int32_t n = 0;
  for (const auto& [id, w] : workers_) {
    if (!w.given_up && w.holding == portion && w.holding_eval == eval_) ++n;
  }
  return n;
}

WorkOrder PortionTable::Assign(int32_t worker, int32_t portion) {
  Slot& s = slots_[portion];
  s.issued = true;
  WorkerState& w = workers_[worker];
  w.holding = portion;
  w.holding_eval = eval_;
  WorkOrder o;
  o.action = WorkAction::kCompute;
  o.eval = eval_;
  o.portion = portion;
  o.first_example = s.portion.first_example;
  o.num_examples = s.portion.num_examples;
  return o;
}

absl::StatusOr<WorkOrder> PortionTable::GetWork(const WorkReport& r) {
  if (r.worker < 0 || r.worker >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", r.worker, " is not in [0, ", options_.num_workers, ")"));
  }
  if (!std::isfinite(r.loss_sum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", r.worker, " reported a loss that is not finite for "
        "portion ", r.portion, " of evaluation ", r.eval));
  }
  absl::MutexLock l(&mu_);
  WorkOrder o;
  o.eval = eval_;
  if (finished_) {
    o.action = WorkAction::kDone;
    o.message = finish_reason_;
    if (!r.poll) told_done_.insert(r.worker);
    return o;
  }
  if (r.poll) {
    o.eval_open = open_ && r.eval == eval_ && !AllResultsIn();
    return o;
  }
  if (workers_.count(r.worker) == 0) changed_.SignalAll();  // Joined.
  WorkerState& w = workers_[r.worker];
  if (w.incarnation != r.incarnation) {
    // A new process of this worker. What the old one won and pushed is on
    // the shards and stays used; results it had not pushed are lost and
    // handed out again. Either way it computes nothing more of this
    // evaluation, so nothing it pushes can be counted twice.
    if (w.incarnation != 0) {
      if (!w.won.empty() && !w.pushed) {
        Reopen(&w);
        changed_.SignalAll();
      }
      w.benched_eval = eval_;
    }
    w.incarnation = r.incarnation;
    w.given_up = false;
  } else if (w.given_up) {
    // Its used results were handed out again: it drops what it holds and
    // sits out the rest of this evaluation.
    w.given_up = false;
    w.benched_eval = eval_;
    o.discard = true;
  } else {
    const bool current = open_ && r.eval == eval_;
    const bool known = current && r.portion >= 0 &&
                       r.portion < static_cast<int32_t>(slots_.size());
    if (known && slots_[r.portion].winner == r.worker &&
        w.won.count(r.portion) > 0) {
      // A retry of a report that was taken (its reply was lost): the result
      // is used, so say so again; the worker keeps what it was handed then
      // if that is still wanted.
      o.accepted = true;
      if (w.holding >= 0 && w.holding_eval == eval_ &&
          slots_[w.holding].winner < 0) {
        WorkOrder again = Assign(r.worker, w.holding);
        again.accepted = true;
        return again;
      }
    } else if (known && slots_[r.portion].winner < 0 &&
               w.benched_eval != eval_) {
      Slot& s = slots_[r.portion];
      s.winner = r.worker;
      s.loss_sum = r.loss_sum;
      w.won.insert(r.portion);
      w.pushed = false;  // This result still has to be pushed.
      o.accepted = true;
      if (AllResultsIn()) results_in_ = absl::Now();
      changed_.SignalAll();
    }
    if (open_ && r.pushed_eval == eval_) {
      w.pushed = true;
      changed_.SignalAll();
    }
  }
  w.holding = -1;
  if (!open_) return o;  // kWait
  if (AllResultsIn()) {
    if (!w.won.empty() && !w.pushed) o.action = WorkAction::kPush;
    return o;
  }
  if (w.benched_eval == eval_) return o;  // kWait
  WorkOrder assigned;
  bool found = false;
  for (size_t p = 0; p < slots_.size() && !found; ++p) {
    if (!slots_[p].issued) {
      assigned = Assign(r.worker, static_cast<int32_t>(p));
      found = true;
    }
  }
  if (!found) {  // A backup copy of an unfinished portion.
    int32_t best = -1;
    int32_t best_holders = options_.max_copies;
    for (size_t p = 0; p < slots_.size(); ++p) {
      if (slots_[p].winner >= 0) continue;
      const int32_t h = Holders(static_cast<int32_t>(p));
      if (h < best_holders) {
        best = static_cast<int32_t>(p);
        best_holders = h;
      }
    }
    if (best >= 0) {
      assigned = Assign(r.worker, best);
      ++backups_issued_;
      found = true;
    }
  }
  if (!found) return o;  // kWait
  assigned.accepted = o.accepted;
  assigned.discard = o.discard;
  return assigned;
}

void PortionTable::Reopen(WorkerState* w) {
  for (const int32_t p : w->won) slots_[p] = Slot{slots_[p].portion};
  w->won.clear();
  w->pushed = false;
  w->holding = -1;
  w->benched_eval = eval_;
  ++given_up_;
  results_in_ = absl::InfiniteFuture();
}

bool PortionTable::GiveUpOnLatePushers(absl::Time now) {
  if (now < results_in_ + options_.push_timeout) return false;
  bool any = false;
  for (auto& [id, w] : workers_) {
    if (w.given_up || w.won.empty() || w.pushed) continue;
    Reopen(&w);
    w.given_up = true;
    any = true;
  }
  return any;
}

absl::StatusOr<EvalOutcome> PortionTable::Evaluate(
    int64_t eval, std::vector<Portion> portions) {
  absl::MutexLock l(&mu_);
  if (finished_) return absl::CancelledError(finish_reason_);
  if (eval <= eval_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation ", eval, " is not after evaluation ", eval_));
  }
  eval_ = eval;
  slots_.clear();
  for (const Portion& p : portions) slots_.push_back(Slot{p});
  for (auto& [id, w] : workers_) {
    w.won.clear();
    w.pushed = false;
  }
  backups_issued_ = 0;
  given_up_ = 0;
  results_in_ = slots_.empty() ? absl::Now() : absl::InfiniteFuture();
  open_ = true;
  const absl::Time start = absl::Now();
  while (true) {
    if (finished_) {
      open_ = false;
      return absl::CancelledError(finish_reason_);
    }
    const absl::Time now = absl::Now();
    if (AllResultsIn()) {
      bool all_pushed = true;
      for (const auto& [id, w] : workers_) {
        if (!w.given_up && !w.won.empty() && !w.pushed) all_pushed = false;
      }
      if (all_pushed) break;
      if (GiveUpOnLatePushers(now)) continue;
    }
    if (now - start > options_.eval_timeout) {
      open_ = false;
      return absl::DeadlineExceededError(absl::StrCat(
          "evaluation ", eval, " did not finish in ",
          absl::FormatDuration(options_.eval_timeout),
          ": no worker computes its portions"));
    }
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  open_ = false;
  EvalOutcome out;
  for (const Slot& s : slots_) {
    out.loss_sum += s.loss_sum;
    out.examples += s.portion.num_examples;
  }
  for (const auto& [id, w] : workers_) {
    if (!w.given_up && !w.won.empty()) out.workers.push_back(id);
  }
  out.backups_issued = backups_issued_;
  out.workers_given_up = given_up_;
  return out;
}

int32_t PortionTable::WorkersToldDone() const {
  absl::MutexLock l(&mu_);
  return static_cast<int32_t>(told_done_.size());
}

int32_t PortionTable::WaitForWorkers(absl::Duration max_wait) {
  const absl::Time deadline = absl::Now() + max_wait;
  absl::MutexLock l(&mu_);
  while (!finished_ &&
         static_cast<int32_t>(workers_.size()) < options_.num_workers &&
         !changed_.WaitWithDeadline(&mu_, deadline)) {
  }
  return static_cast<int32_t>(workers_.size());
}

void PortionTable::Finish(const std::string& why) {
  absl::MutexLock l(&mu_);
  finished_ = true;
  finish_reason_ = why;
  changed_.SignalAll();
}

}  // namespace downpour
