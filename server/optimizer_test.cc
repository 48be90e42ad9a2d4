#include "server/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

TEST(OptimizerTest, SgdStep) {
  auto opt = CreateOptimizer({"sgd", 0.5f});
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {1, 2, 3}, g = {2, -4, 0};
  (*opt)->Apply(3, g.data(), 1.0f, w.data(), nullptr);
  EXPECT_EQ(w, (std::vector<float>{0, 4, 3}));
  (*opt)->Apply(3, g.data(), 0.5f, w.data(), nullptr);  // scaled gradient
  EXPECT_EQ(w, (std::vector<float>{-0.5, 5, 3}));
}

TEST(OptimizerTest, MomentumAccumulatesVelocity) {
  OptimizerOptions o{"momentum", 0.1f, 0.9f};
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok());
  ASSERT_EQ((*opt)->StateSize(), 1);
  std::vector<float> w = {0}, g = {1}, v = {(*opt)->InitialState()};
  (*opt)->Apply(1, g.data(), 1, w.data(), v.data());
  EXPECT_FLOAT_EQ(v[0], 1);
  EXPECT_FLOAT_EQ(w[0], -0.1f);
  (*opt)->Apply(1, g.data(), 1, w.data(), v.data());
  EXPECT_FLOAT_EQ(v[0], 1.9f);
  EXPECT_FLOAT_EQ(w[0], -0.1f - 0.19f);
}

TEST(OptimizerTest, AdagradNormalizesByAccumulatedSquares) {
  OptimizerOptions o;
  o.name = "adagrad";
  o.learning_rate = 1.0f;
  o.adagrad_initial_accumulator = 0.0001f;
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {0, 0}, g = {100, 0.01f};
  std::vector<float> acc(2, (*opt)->InitialState());
  (*opt)->Apply(2, g.data(), 1, w.data(), acc.data());
  // Both coordinates move by about lr whatever the gradient's scale.
  EXPECT_NEAR(w[0], -1.0, 1e-3);
  EXPECT_NEAR(w[1], -0.01 / std::sqrt(0.0001 + 0.0001), 1e-4);
  EXPECT_FLOAT_EQ(acc[0], 0.0001f + 10000.0f);
}

// A non-finite gradient value (which the store refuses before applying, so
// only one changed afterwards in a worker's shared memory reaches here)
// counts as 0 in every optimizer: the parameters and the state get the
// same bits as from a 0 there, and stay finite. The vector loops' tails
// are covered by the length.
TEST(OptimizerTest, NonFiniteGradientValuesCountAsZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const char* name : {"sgd", "momentum", "adagrad", "adam"}) {
    OptimizerOptions o{name, 0.1f};
    auto opt = CreateOptimizer(o);
    ASSERT_TRUE(opt.ok()) << name;
    const int n = 37;
    std::vector<float> bad(n), zero(n);
    for (int i = 0; i < n; ++i) bad[i] = zero[i] = 0.01f * (i - 18);
    for (int i : {0, 5, 17, 36}) {
      bad[i] = i == 5 ? inf : i == 17 ? -inf : std::nanf("");
      zero[i] = 0.0f;
    }
    const int k = (*opt)->StateSize();
    std::vector<float> w1(n, 0.5f), w2(n, 0.5f);
    std::vector<float> s1(static_cast<size_t>(n) * k, (*opt)->InitialState());
    std::vector<float> s2 = s1;
    for (int t = 1; t <= 2; ++t) {
      (*opt)->ApplyAt(t, n, bad.data(), 0.5f, w1.data(), s1.data());
      (*opt)->ApplyAt(t, n, zero.data(), 0.5f, w2.data(), s2.data());
    }
    const auto bits = [](const std::vector<float>& v) {
      std::vector<uint32_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) std::memcpy(&b[i], &v[i], 4);
      return b;
    };
    EXPECT_EQ(bits(w1), bits(w2)) << name;
    EXPECT_EQ(bits(s1), bits(s2)) << name;
    for (float v : w1) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(OptimizerTest, RejectsBadOptions) {
  EXPECT_FALSE(CreateOptimizer({"rmsprop", 0.1f}).ok());
  EXPECT_NE(CreateOptimizer({"rmsprop", 0.1f}).status().message().find("adam"),
            std::string::npos);
  EXPECT_FALSE(CreateOptimizer({"sgd", 0.0f}).ok());
  EXPECT_FALSE(CreateOptimizer({"sgd", NAN}).ok());
  EXPECT_FALSE(CreateOptimizer({"momentum", 0.1f, 1.5f}).ok());
}

// ---- Schedules, worker scaling, Adam ---------------------------------------

TEST(OptimizerTest, WarmupThenCosine) {
  LrSchedule s;
  s.decay = "cosine";
  s.warmup_updates = 4;
  s.decay_updates = 14;
  s.min_factor = 0.1f;
  ASSERT_TRUE(ValidateLrSchedule(s).ok());
  EXPECT_FLOAT_EQ(LrFactor(s, 1), 0.25f);
  EXPECT_FLOAT_EQ(LrFactor(s, 2), 0.5f);
  EXPECT_FLOAT_EQ(LrFactor(s, 4), 1.0f);
  EXPECT_NEAR(LrFactor(s, 9), 0.1f + 0.9f * 0.5f, 1e-6);  // Half-way.
  EXPECT_NEAR(LrFactor(s, 14), 0.1f, 1e-6);
  EXPECT_NEAR(LrFactor(s, 1000), 0.1f, 1e-6);
  for (int t = 5; t < 14; ++t) EXPECT_LT(LrFactor(s, t + 1), LrFactor(s, t));
}

TEST(OptimizerTest, StepDecayAndNone) {
  LrSchedule s;
  EXPECT_FLOAT_EQ(LrFactor(s, 1), 1.0f);
  EXPECT_FLOAT_EQ(LrFactor(s, 12345), 1.0f);
  s.decay = "step";
  s.step_every = 10;
  s.step_gamma = 0.5f;
  EXPECT_FLOAT_EQ(LrFactor(s, 9), 1.0f);
  EXPECT_FLOAT_EQ(LrFactor(s, 10), 0.5f);
  EXPECT_FLOAT_EQ(LrFactor(s, 25), 0.25f);
}

TEST(OptimizerTest, BadSchedulesAreRefused) {
  LrSchedule s;
  s.decay = "exponential";
  EXPECT_NE(ValidateLrSchedule(s).message().find("exponential"),
            std::string::npos);
  s.decay = "cosine";  // No horizon.
  EXPECT_FALSE(ValidateLrSchedule(s).ok());
  s.decay = "step";  // No interval.
  EXPECT_FALSE(ValidateLrSchedule(s).ok());
  OptimizerOptions o;
  o.schedule = s;
  EXPECT_EQ(CreateOptimizer(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, ScheduleDrivesTheStep) {
  OptimizerOptions o{"sgd", 1.0f};
  o.schedule.warmup_updates = 4;
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {0}, g = {1};
  (*opt)->ApplyAt(1, 1, g.data(), 1.0f, w.data(), nullptr);
  EXPECT_FLOAT_EQ(w[0], -0.25f);
  (*opt)->ApplyAt(8, 1, g.data(), 1.0f, w.data(), nullptr);
  EXPECT_FLOAT_EQ(w[0], -1.25f);
}

TEST(OptimizerTest, WorkerScaling) {
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.1f, "none", true, 4), 0.1f);
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.1f, "linear", true, 4), 0.4f);
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.1f, "sqrt", true, 4), 0.2f);
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.1f, "linear", false, 4), 0.025f);
  EXPECT_FLOAT_EQ(*ScaleLearningRate(0.1f, "sqrt", false, 4), 0.05f);
  EXPECT_FALSE(ScaleLearningRate(0.1f, "cubic", false, 4).ok());
  EXPECT_FALSE(ScaleLearningRate(0.1f, "linear", false, 0).ok());
}

// Adam against a double-precision transcription of Kingma & Ba's
// Algorithm 1, over several steps, with m and v interleaved.
TEST(OptimizerTest, AdamMatchesThePaper) {
  OptimizerOptions o{"adam", 0.01f};
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok());
  ASSERT_EQ((*opt)->StateSize(), 2);
  std::vector<float> w = {0.5f, -1.0f}, st(4, (*opt)->InitialState());
  double rw[2] = {0.5, -1.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 5; ++t) {
    std::vector<float> g = {0.3f * t, -2.0f / t};
    (*opt)->ApplyAt(t, 2, g.data(), 0.5f, w.data(), st.data());
    for (int i = 0; i < 2; ++i) {
      const double gi = 0.5 * g[i];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, t));
      const double vh = v[i] / (1 - std::pow(0.999, t));
      rw[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(w[i], rw[i], 1e-5) << "t " << t << " i " << i;
      EXPECT_NEAR(st[2 * i], m[i], 1e-6);
      EXPECT_NEAR(st[2 * i + 1], v[i], 1e-6);
    }
  }
  // Elementwise: applying the two elements one at a time is the same.
  std::vector<float> w2 = {0.5f, -1.0f}, st2(4, 0.f);
  for (int t = 1; t <= 5; ++t) {
    std::vector<float> g = {0.3f * t, -2.0f / t};
    (*opt)->ApplyAt(t, 1, &g[0], 0.5f, &w2[0], &st2[0]);
    (*opt)->ApplyAt(t, 1, &g[1], 0.5f, &w2[1], &st2[2]);
  }
  EXPECT_EQ(w, w2);
  EXPECT_EQ(st, st2);
  o.adam_beta1 = 1.0f;
  EXPECT_FALSE(CreateOptimizer(o).ok());
}

// The whole-chunk loop (vectorized for the CPU at hand: AVX-512, AVX2 or the
// baseline) gives the very bits of the float formula written out element by
// element, over a length that leaves a remainder and a misaligned gradient.
TEST(OptimizerTest, AdamVectorLoopGivesTheScalarBits) {
  OptimizerOptions o{"adam", 0.003f};
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok());
  constexpr int kN = 1037;
  std::vector<float> w(kN), st(2 * kN, 0.0f), rw(kN), rst(2 * kN, 0.0f);
  std::vector<char> gbytes(4 * kN + 4);
  for (int i = 0; i < kN; ++i) w[i] = rw[i] = std::sin(0.37f * i);
  for (int t = 1; t <= 4; ++t) {
    std::vector<float> g(kN);
    for (int i = 0; i < kN; ++i) g[i] = std::cos(0.11f * i * t) * 1e-2f;
    std::memcpy(gbytes.data() + 1, g.data(), 4 * kN);  // Misaligned.
    (*opt)->ApplyAt(t, kN, gbytes.data() + 1, 0.5f, w.data(), st.data());
    const double c2 = std::sqrt(1.0 - std::pow(double{0.999f}, t));
    const float lr = static_cast<float>(
        double{0.003f} * double{1.0f} * c2 / (1.0 - std::pow(double{0.9f}, t)));
    const float eps = static_cast<float>(double{1e-8f} * c2);
    const float b1 = 0.9f, b2 = 0.999f, a1 = 1 - b1, a2 = 1 - b2;
    for (int i = 0; i < kN; ++i) {
      volatile float gi = 0.5f * g[i];  // One rounding per operation.
      volatile float m = b1 * rst[2 * i];
      m = m + a1 * gi;
      volatile float gg = a2 * gi;
      gg = gg * gi;
      volatile float v = b2 * rst[2 * i + 1];
      v = v + gg;
      rst[2 * i] = m;
      rst[2 * i + 1] = v;
      volatile float den = std::sqrt(static_cast<float>(v));
      den = den + eps;
      volatile float num = lr * m;
      volatile float upd = num / den;
      volatile float keep = rw[i] * 1.0f;
      rw[i] = keep - upd;
    }
  }
  EXPECT_EQ(0, std::memcmp(w.data(), rw.data(), 4 * kN));
  EXPECT_EQ(0, std::memcmp(st.data(), rst.data(), 8 * kN));
}

// AdamW: PyTorch's torch.optim.AdamW step, transcribed in double precision
// (decay by lr * wd before the Adam step, the schedule scaling both), and
// with a zero gradient only the decay moves a weight.
TEST(OptimizerTest, AdamWDecaysWeightsDecoupled) {
  OptimizerOptions o{"adam", 0.01f};
  o.weight_decay = 0.1f;
  o.schedule.warmup_updates = 4;  // lr * t / 4 for t <= 4.
  auto opt = CreateOptimizer(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> w = {0.5f, -1.0f}, st(4, 0.f);
  double rw[2] = {0.5, -1.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 6; ++t) {
    std::vector<float> g = {0.3f * t, -2.0f / t};
    (*opt)->ApplyAt(t, 2, g.data(), 1.0f, w.data(), st.data());
    const double lr = 0.01 * std::min(1.0, t / 4.0);
    for (int i = 0; i < 2; ++i) {
      rw[i] *= 1 - lr * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * double{g[i]} * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t));
      const double vh = v[i] / (1 - std::pow(0.999, t));
      rw[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(w[i], rw[i], 1e-5) << "t " << t << " i " << i;
    }
  }
  // Zero gradient, zero state: w becomes w * (1 - lr * wd) exactly.
  std::vector<float> z = {2.0f}, zs(2, 0.f), zg = {0.0f};
  (*opt)->ApplyAt(10, 1, zg.data(), 1.0f, z.data(), zs.data());
  EXPECT_FLOAT_EQ(z[0], 2.0f * (1 - 0.01f * 0.1f));

  o.weight_decay = -0.1f;
  EXPECT_NE(CreateOptimizer(o).status().message().find("weight decay"),
            std::string::npos);
  o.weight_decay = 0.1f;
  o.name = "adagrad";
  EXPECT_NE(CreateOptimizer(o).status().message().find("adam only"),
            std::string::npos);
}

}  // namespace
}  // namespace downpour
