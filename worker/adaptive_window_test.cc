#include "worker/adaptive_window.h"

#include <algorithm>
#include <functional>

#include "gtest/gtest.h"

namespace downpour {
namespace {

// Runs `rounds` rounds against a link whose throughput (bytes/s) at window
// w is rate(w); returns the final window.
int RunRounds(AdaptiveWindow& w, int rounds, const std::function<double(int)>& rate) {
  for (int i = 0; i < rounds; ++i) {
    const double r = rate(w.window());
    w.OnRound(64 << 20, absl::Seconds((64 << 20) / r));
  }
  return w.window();
}

TEST(AdaptiveWindowTest, LoopbackLikeStaysAtOne) {
  // More in flight is slower (cache misses): stay at 1, probing rarely.
  AdaptiveWindow w({});
  int at_two = 0;
  for (int i = 0; i < 2000; ++i) {
    const int win = w.window();
    at_two += win > 1;
    w.OnRound(64 << 20, absl::Seconds((64 << 20) / (win == 1 ? 4e9 : 3.5e9)));
  }
  EXPECT_EQ(w.window(), 1);
  EXPECT_LT(at_two, 40);  // Probe rounds back off: under 2% of rounds.
}

TEST(AdaptiveWindowTest, LargeBandwidthDelayProductClimbs) {
  // Throughput grows with the window up to 8 calls (the BDP), then flat.
  AdaptiveWindow w({});
  EXPECT_EQ(RunRounds(w, 200, [](int win) { return 0.25e9 * std::min(win, 8); }), 8);
}

TEST(AdaptiveWindowTest, RespectsMaximum) {
  AdaptiveWindowOptions o;
  o.max_window = 4;
  AdaptiveWindow w(o);
  EXPECT_EQ(RunRounds(w, 300, [](int win) { return 1e8 * win; }), 4);
}

TEST(AdaptiveWindowTest, IgnoresEmptyRounds) {
  AdaptiveWindow w({});
  w.OnRound(0, absl::Seconds(1));
  w.OnRound(100, absl::ZeroDuration());
  EXPECT_EQ(w.window(), 1);
}

}  // namespace
}  // namespace downpour
