#include "worker/adaptive_window.h"

#include <algorithm>

namespace downpour {

namespace {
constexpr int kProbeRounds = 2;
}  // namespace

AdaptiveWindow::AdaptiveWindow(const AdaptiveWindowOptions& options)
    : options_(options), probe_every_(options.probe_every) {}

int AdaptiveWindow::window() const {
  absl::MutexLock l(&mu_);
  return probe_rounds_ > 0 ? std::min(current_ * 2, options_.max_window)
                           : current_;
}

void AdaptiveWindow::OnRound(int64_t bytes, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (bytes <= 0 || seconds <= 0) return;
  const double rate = bytes / seconds;
  absl::MutexLock l(&mu_);
  if (probe_rounds_ > 0) {
    probe_min_rate_ =
        probe_rounds_ == kProbeRounds ? rate : std::min(probe_min_rate_, rate);
    if (--probe_rounds_ > 0) return;
    if (probe_min_rate_ > current_rate_ * options_.gain) {
      current_ = std::min(current_ * 2, options_.max_window);
      current_rate_ = probe_min_rate_;
      probe_every_ = options_.probe_every;  // Keep climbing soon.
    } else {
      probe_every_ = std::min(probe_every_ * 2, options_.max_probe_every);
    }
    rounds_since_probe_ = 0;
    return;
  }
  current_rate_ = current_rate_ == 0 ? rate : 0.7 * current_rate_ + 0.3 * rate;
  if (++rounds_since_probe_ >= probe_every_ && current_ < options_.max_window) {
    probe_rounds_ = kProbeRounds;
  }
}

}  // namespace downpour
