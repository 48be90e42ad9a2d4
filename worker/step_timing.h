// File: worker/step_timing.h
//
// Where a worker's step time goes. PhaseTimes adds up seconds per phase
// (waiting for data, compute, pull, push); a Stopwatch charges the time since
// its last lap to one phase; a ProgressWindow accumulates the steps between
// two progress reports and turns them into a Progress.
//
// Usage (one training loop):
//   Stopwatch clock;
//   ProgressWindow window(absl::Now());
//   ...; window.times().data += clock.Lap();
//   ...; window.times().compute += clock.Lap(); window.AddStep(loss, 64);
//   if (steps % log_every == 0) on_progress(window.Close(steps, epoch));
//
// Thread-safety: none; each object belongs to the loop that owns it.
#ifndef DOWNPOUR_WORKER_STEP_TIMING_H_
#define DOWNPOUR_WORKER_STEP_TIMING_H_

#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace downpour {

// Seconds spent in each phase.
struct PhaseTimes {
  double data = 0, compute = 0, pull = 0, push = 0;
  double Total() const { return data + compute + pull + push; }
  PhaseTimes& operator+=(const PhaseTimes& o) {
    data += o.data;
    compute += o.compute;
    pull += o.pull;
    push += o.push;
    return *this;
  }
  // e.g. "[data 1% compute 80% pull 10% push 9%]".
  std::string Shares() const;
  // "input-bound", "communication-bound" or "compute-bound".
  std::string Verdict() const;
};

struct Progress {
  int64_t step = 0;  // Steps completed.
  int epoch = 0;
  float loss = 0;    // Mean training loss over the window.
  double examples_per_sec = 0;
  double sec_per_batch = 0;
  PhaseTimes window;  // Time per phase in the window.
  int64_t window_examples = 0;  // Examples trained in the window.
};

// Measures consecutive intervals.
class Stopwatch {
 public:
  Stopwatch() : start_(absl::Now()) {}
  // Starts the next interval now, discarding the current one.
  void Restart() { start_ = absl::Now(); }
  // Seconds since the last Lap (or Restart, or construction); restarts.
  double Lap() {
    const absl::Time now = absl::Now();
    const double s = absl::ToDoubleSeconds(now - start_);
    start_ = now;
    return s;
  }

 private:
  absl::Time start_;
};

// The steps since the last progress report.
class ProgressWindow {
 public:
  explicit ProgressWindow(absl::Time begin) : begin_(begin) {}

  // Time per phase so far in this window; the loop adds to it.
  PhaseTimes& times() { return times_; }
  void AddStep(float loss, int examples) {
    loss_ += loss;
    ++steps_;
    examples_ += examples;
  }
  int64_t steps() const { return steps_; }
  // Mean loss of the window's steps. Precondition: steps() > 0.
  float MeanLoss() const { return static_cast<float>(loss_ / steps_); }

  // The window as a Progress after `step` steps in epoch `epoch`; then starts
  // the next window empty, now. Precondition: steps() > 0.
  Progress Close(int64_t step, int epoch);

 private:
  absl::Time begin_;
  PhaseTimes times_;
  double loss_ = 0;
  int64_t steps_ = 0;
  int64_t examples_ = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_STEP_TIMING_H_
