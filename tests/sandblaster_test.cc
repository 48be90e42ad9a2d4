// Sandblaster L-BFGS (--mode=sandblaster) with real ps_server and ps_worker
// processes on loopback: convergence to the optimum of a convex problem
// computed here independently, exact portion accounting with a slowed
// worker, a worker SIGKILLed mid-iteration, and the chief's death.
//
// The convex problem: softmax regression on fixed features (a 7x7 max pool
// of the image, 16 values, then one dense layer: 170 parameters) over the
// first 2,000 Fashion-MNIST training images, full batch. Its optimum is
// found here by damped Newton in double precision.
#include <algorithm>
#include <array>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/report.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"
#include "worker/data/split_reader.h"

namespace downpour {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr int kExamples = 2000;
constexpr int kFeatures = 16;
constexpr int kClasses = 10;

bool HaveData() {
  return static_cast<bool>(
      std::ifstream(absl::StrCat(kData, "/train-images-idx3-ubyte.gz")));
}

std::string ModelFile() {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/softmax_regression.prototxt");
  std::ofstream(path) << "name: \"softmax_regression\"\n"
                         "input { channels: 1 height: 28 width: 28 classes: 10 }\n"
                         "layer { name: \"pool\" max_pool { kernel: 7 } }\n"
                         "layer { name: \"fc\" dense { out_features: 10 } }\n";
  return path;
}

struct Job {
  std::unique_ptr<TestCluster> cluster;
  std::vector<std::unique_ptr<Subprocess>> workers;
};

// 2 servers and `delays.size()` workers (worker i slowed by delays[i] ms
// per compute batch), full batch over kExamples, `epochs` evaluations.
Job Start(const std::vector<int>& delays, int epochs) {
  Job job;
  const int n = static_cast<int>(delays.size());
  TestClusterOptions co;
  co.num_shards = 2;
  co.num_workers = n;
  co.server_flags = {"--mode=sandblaster"};
  absl::StatusOr<std::unique_ptr<TestCluster>> c = TestCluster::Start(co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return job;
  job.cluster = *std::move(c);
  const std::string model = ModelFile();
  for (int i = 0; i < n; ++i) {
    job.workers.push_back(StartChild(
        {"worker/ps_worker",
         absl::StrCat("--ps_hosts=", absl::StrJoin(job.cluster->hosts(), ",")),
         absl::StrCat("--worker_index=", i), absl::StrCat("--num_workers=", n),
         "--mode=sandblaster", absl::StrCat("--model=", model),
         absl::StrCat("--data_dir=", kData),
         absl::StrCat("--max_train_examples=", kExamples),
         absl::StrCat("--sandblaster_batch=", kExamples),
         "--portion_examples=250", "--batch_size=125", "--seed=3",
         absl::StrCat("--epochs=", epochs),
         absl::StrCat("--debug_step_delay_ms=", delays[i])}));
  }
  return job;
}

struct Outcome {
  bool ok = false;
  std::vector<JsonNumbers> done;  // Per worker (empty when it failed).
  int64_t iterations = -1, evaluations = -1;
  double loss = NAN;
  std::string output;
};

// Waits for every worker but those in `skip` and collects their results.
Outcome Wait(Job& job, absl::Duration timeout,
             const std::vector<int>& skip = {}) {
  Outcome out;
  out.ok = true;
  out.done.resize(job.workers.size());
  for (size_t i = 0; i < job.workers.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), static_cast<int>(i)) != skip.end()) {
      continue;
    }
    Subprocess* w = job.workers[i].get();
    std::vector<std::string> lines;
    const bool exited = w != nullptr && w->WaitFor(timeout, &lines);
    for (const std::string& l : lines) absl::StrAppend(&out.output, l, "\n");
    if (!exited || !w->exit_status().success()) {
      out.ok = false;
      ADD_FAILURE() << "worker " << i << " "
                    << (exited ? w->exit_status().ToString() : "still running")
                    << ":\n" << absl::StrJoin(w->tail(), "\n");
      continue;
    }
    for (const std::string& l : w->tail()) {
      if (auto d = ParseTaggedJson(l, "DONE")) out.done[i] = *d;
      // "worker 0: sandblaster: I iterations, E evaluations (L in line
      // searches), loss F"
      if (absl::StrContains(l, ": sandblaster: ")) {
        std::vector<std::string> words = absl::StrSplit(l, ' ');
        for (size_t k = 1; k < words.size(); ++k) {
          if (words[k] == "iterations,") {
            EXPECT_TRUE(absl::SimpleAtoi(words[k - 1], &out.iterations));
          }
          if (words[k] == "evaluations") {
            EXPECT_TRUE(absl::SimpleAtoi(words[k - 1], &out.evaluations));
          }
        }
        EXPECT_TRUE(absl::SimpleAtod(words.back(), &out.loss)) << l;
      }
    }
  }
  return out;
}

// The optimum of the softmax regression, by damped Newton in double.
double ReferenceOptimum() {
  SplitRequest r;
  r.dataset = DatasetKind::kFashionMnist;
  r.data_dir = kData;
  r.train = true;
  r.max_examples = kExamples;
  r.shape = {1, 28, 28};
  r.num_classes = kClasses;
  absl::StatusOr<Dataset> d = LoadSplit(r, 2, false, nullptr);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return NAN;
  constexpr int F = kFeatures + 1;  // With the bias.
  const int n = static_cast<int>(d->size);
  std::vector<std::array<double, F>> x(n);
  for (int e = 0; e < n; ++e) {
    const float* img = d->images.data() + static_cast<int64_t>(e) * 784;
    for (int by = 0; by < 4; ++by) {
      for (int bx = 0; bx < 4; ++bx) {
        float m = -1e30f;
        for (int y = 0; y < 7; ++y) {
          for (int xx = 0; xx < 7; ++xx) {
            m = std::max(m, img[(by * 7 + y) * 28 + bx * 7 + xx]);
          }
        }
        x[e][by * 4 + bx] = m;
      }
    }
    x[e][kFeatures] = 1.0;
  }
  constexpr int P = kClasses * F;
  std::vector<double> w(P, 0.0);
  auto loss_grad_hess = [&](const std::vector<double>& w, std::vector<double>* g,
                            std::vector<double>* h) {
    double f = 0;
    if (g != nullptr) g->assign(P, 0.0);
    if (h != nullptr) h->assign(P * P, 0.0);
    for (int e = 0; e < n; ++e) {
      double z[kClasses], p[kClasses], mx = -1e300;
      for (int c = 0; c < kClasses; ++c) {
        z[c] = 0;
        for (int j = 0; j < F; ++j) z[c] += w[c * F + j] * x[e][j];
        mx = std::max(mx, z[c]);
      }
      double sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += (p[c] = std::exp(z[c] - mx));
      for (double& v : p) v /= sum;
      const int label = d->labels[e];
      f += -(z[label] - mx - std::log(sum));
      if (g == nullptr) continue;
      for (int c = 0; c < kClasses; ++c) {
        const double r = p[c] - (c == label ? 1.0 : 0.0);
        for (int j = 0; j < F; ++j) (*g)[c * F + j] += r * x[e][j] / n;
      }
      for (int c = 0; c < kClasses; ++c) {
        for (int c2 = 0; c2 < kClasses; ++c2) {
          const double k = (c == c2 ? p[c] : 0.0) - p[c] * p[c2];
          for (int j = 0; j < F; ++j) {
            for (int j2 = 0; j2 < F; ++j2) {
              (*h)[(c * F + j) * P + c2 * F + j2] += k * x[e][j] * x[e][j2] / n;
            }
          }
        }
      }
    }
    return f / n;
  };
  double f = 0;
  for (int it = 0; it < 40; ++it) {
    std::vector<double> g, h;
    f = loss_grad_hess(w, &g, &h);
    // Solve (H + 1e-9 I) s = -g by Gaussian elimination (H is singular
    // along the classes' common shift).
    for (int i = 0; i < P; ++i) h[i * P + i] += 1e-9;
    std::vector<double> s(P);
    for (int i = 0; i < P; ++i) s[i] = -g[i];
    for (int col = 0; col < P; ++col) {
      int piv = col;
      for (int r2 = col + 1; r2 < P; ++r2) {
        if (std::abs(h[r2 * P + col]) > std::abs(h[piv * P + col])) piv = r2;
      }
      for (int k = 0; k < P; ++k) std::swap(h[col * P + k], h[piv * P + k]);
      std::swap(s[col], s[piv]);
      for (int r2 = col + 1; r2 < P; ++r2) {
        const double m = h[r2 * P + col] / h[col * P + col];
        for (int k = col; k < P; ++k) h[r2 * P + k] -= m * h[col * P + k];
        s[r2] -= m * s[col];
      }
    }
    for (int i = P - 1; i >= 0; --i) {
      for (int k = i + 1; k < P; ++k) s[i] -= h[i * P + k] * s[k];
      s[i] /= h[i * P + i];
    }
    double t = 1;
    std::vector<double> trial(P);
    for (int ls = 0; ls < 30; ++ls, t *= 0.5) {
      for (int i = 0; i < P; ++i) trial[i] = w[i] + t * s[i];
      if (loss_grad_hess(trial, nullptr, nullptr) <= f) break;
    }
    w = trial;
  }
  return loss_grad_hess(w, nullptr, nullptr);
}

TEST(SandblasterTest, ConvergesToTheOptimumOfAConvexProblem) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const double optimum = ReferenceOptimum();
  Job job = Start({0, 0}, 400);
  Outcome out = Wait(job, absl::Seconds(240));
  ASSERT_TRUE(out.ok) << out.output;
  EXPECT_GT(out.iterations, 20);
  // From ln 10 = 2.30 at the start to within 0.5% of the optimum (the pooled
  // features are strongly correlated, so the last digits come slowly), and
  // never below it beyond float32 rounding.
  EXPECT_NEAR(out.loss, optimum, 5e-3 * optimum) << out.output;
  EXPECT_GE(out.loss, optimum - 1e-4);
}

TEST(SandblasterTest, PortionAccountingIsExactWithASlowWorker) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  Job job = Start({0, 0, 40}, 12);
  Outcome out = Wait(job, absl::Seconds(240));
  ASSERT_TRUE(out.ok) << out.output;
  ASSERT_GT(out.evaluations, 0);
  int64_t used = 0;
  for (const JsonNumbers& d : out.done) used += static_cast<int64_t>(d.at("portions"));
  // Every evaluation's 8 portions were used exactly once.
  EXPECT_EQ(used, out.evaluations * (kExamples / 250)) << out.output;
  // The chief began once the whole job had asked for work, so the fast
  // worker has its share even when its process came up last.
  EXPECT_TRUE(absl::StrContains(out.output, "all 3 workers joined"))
      << out.output;
  const double slow = out.done[2].at("portions");
  EXPECT_LT(slow, out.done[0].at("portions")) << out.output;
  EXPECT_LT(slow, out.done[1].at("portions")) << out.output;
}

TEST(SandblasterTest, AWorkerKilledMidIterationCostsNoIteration) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const std::vector<int> delays = {4, 4, 4};
  Job reference = Start(delays, 16);
  const Outcome whole = Wait(reference, absl::Seconds(240));
  ASSERT_TRUE(whole.ok) << whole.output;

  Job job = Start(delays, 16);
  std::vector<std::string> seen;
  ASSERT_TRUE(job.workers[0]
                  ->WaitForLine(
                      [](const std::string& l) {
                        return absl::StrContains(l, "iteration 3,");
                      },
                      absl::Seconds(120), &seen)
                  .ok());
  ASSERT_TRUE(job.workers[2]->Signal(SIGKILL).ok());
  const Outcome out = Wait(job, absl::Seconds(240), {2});
  ASSERT_TRUE(out.ok) << out.output;
  EXPECT_EQ(out.iterations, whole.iterations) << out.output;
  EXPECT_EQ(out.evaluations, whole.evaluations) << out.output;
  EXPECT_NEAR(out.loss, whole.loss, 1e-4 * whole.loss);
}

TEST(SandblasterTest, TheChiefsDeathFailsTheJobWithAClearMessage) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  Job job = Start({4, 4, 4}, 1000);
  std::vector<std::string> seen;
  ASSERT_TRUE(job.workers[0]
                  ->WaitForLine(
                      [](const std::string& l) {
                        return absl::StrContains(l, "iteration 2,");
                      },
                      absl::Seconds(120), &seen)
                  .ok());
  ASSERT_TRUE(job.workers[0]->Signal(SIGKILL).ok());
  for (int i = 1; i <= 2; ++i) {
    Subprocess* w = job.workers[i].get();
    std::vector<std::string> lines;
    ASSERT_TRUE(w->WaitFor(absl::Seconds(60), &lines)) << "worker " << i;
    EXPECT_EQ(w->exit_status().exit_code, 3) << w->exit_status().ToString();
    const std::string all = absl::StrJoin(w->tail(), "\n");
    EXPECT_TRUE(absl::StrContains(all, "coordinator")) << all;
    EXPECT_TRUE(absl::StrContains(all, "is gone")) << all;
  }
}

}  // namespace
}  // namespace downpour
