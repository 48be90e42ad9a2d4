#include "worker/step_timing.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace downpour {

std::string PhaseTimes::Shares() const {
  const double t = std::max(Total(), 1e-12);
  return absl::StrFormat("[data %.0f%% compute %.0f%% pull %.0f%% push %.0f%%]",
                         100 * data / t, 100 * compute / t, 100 * pull / t,
                         100 * push / t);
}

std::string PhaseTimes::Verdict() const {
  const double t = std::max(Total(), 1e-12);
  if (data / t > 0.25) return "input-bound";
  if ((pull + push) / t > 0.5) return "communication-bound";
  return "compute-bound";
}

Progress ProgressWindow::Close(int64_t step, int epoch) {
  const double secs = absl::ToDoubleSeconds(absl::Now() - begin_);
  Progress p;
  p.step = step;
  p.epoch = epoch;
  p.loss = MeanLoss();
  p.examples_per_sec = examples_ / std::max(secs, 1e-9);
  p.sec_per_batch = secs / steps_;
  p.window = times_;
  p.window_examples = examples_;
  times_ = PhaseTimes();
  loss_ = 0;
  steps_ = examples_ = 0;
  begin_ = absl::Now();
  return p;
}

}  // namespace downpour
