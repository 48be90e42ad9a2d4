// The worker's metrics through the real endpoint: a progress window shows up
// in the /metrics text (fetched over a real TCP connection) with the step
// split, examples and the verdict.
#include "worker/worker_metrics.h"

#include <string>

#include "common/metrics_scrape.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(WorkerMetricsTest, ProgressWindowsAreServed) {
  auto m = WorkerMetrics::Start("127.0.0.1", 0);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  Progress p;
  p.step = 50;
  p.loss = 0.5f;
  p.examples_per_sec = 1000;
  p.sec_per_batch = 0.064;
  p.window = {0.1, 1.0, 1.5, 0.6};  // pull + push > half: communication-bound
  p.window_examples = 3200;
  (*m)->OnProgress(3, p);
  p.step = 100;
  (*m)->OnProgress(3, p);
  const std::string text = ScrapeMetrics((*m)->port());
  EXPECT_NE(text.find("200 OK"), std::string::npos) << text;
  EXPECT_NE(text.find("downpour_worker_steps_total{worker=\"3\"} 100"),
            std::string::npos) << text;
  EXPECT_NE(text.find("downpour_worker_examples_total{worker=\"3\"} 6400"),
            std::string::npos) << text;
  EXPECT_NE(text.find("downpour_worker_step_seconds_total{phase=\"pull\",worker=\"3\"} 3"),
            std::string::npos) << text;
  EXPECT_NE(text.find("downpour_worker_bottleneck{verdict=\"communication-bound\",worker=\"3\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("downpour_worker_bottleneck{verdict=\"compute-bound\",worker=\"3\"} 0"),
            std::string::npos) << text;
}

TEST(WorkerMetricsTest, BadPortRefused) {
  EXPECT_FALSE(WorkerMetrics::Start("127.0.0.1", 70000).ok());
  auto taken = WorkerMetrics::Start("127.0.0.1", 0);
  ASSERT_TRUE(taken.ok());
  auto again = WorkerMetrics::Start("127.0.0.1", (*taken)->port());
  EXPECT_FALSE(again.ok());
}

}  // namespace
}  // namespace downpour
