#include "worker/sandblaster_lbfgs.h"

#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "server/lbfgs_shard.h"

namespace downpour {
namespace {

// Three shards of uneven sizes in one process; the vector is their
// concatenation.
class InProcessShards final : public ShardVectorOps {
 public:
  explicit InProcessShards(std::vector<int64_t> sizes) {
    for (const int64_t n : sizes) {
      shards_.push_back(std::make_unique<LbfgsShard>(
          n, /*num_workers=*/1,
          [this, i = shards_.size()](absl::Span<float> out) {
            for (size_t k = 0; k < out.size(); ++k) {
              out[k] = served_[Offset(i) + k];
            }
            return absl::OkStatus();
          },
          [this, i = shards_.size()](absl::Span<const float> x) {
            for (size_t k = 0; k < x.size(); ++k) served_[Offset(i) + k] = x[k];
            return absl::OkStatus();
          }));
      total_ += n;
    }
    served_.assign(total_, 0.0f);
    for (const auto& s : shards_) EXPECT_TRUE(s->Run({VectorOp::Load()}).ok());
  }
  absl::StatusOr<std::vector<double>> Run(
      const std::vector<VectorOp>& program) override {
    std::vector<double> sum;
    for (const auto& s : shards_) {
      absl::StatusOr<std::vector<double>> d = s->Run(program);
      if (!d.ok()) return d.status();
      if (sum.empty()) sum.assign(d->size(), 0.0);
      for (size_t i = 0; i < d->size(); ++i) sum[i] += (*d)[i];
    }
    return sum;
  }
  // Writes a whole vector through the workers' path (accumulate, gather).
  void Set(VecRef v, const std::vector<double>& values) {
    ++eval_;
    for (size_t i = 0; i < shards_.size(); ++i) {
      std::vector<float> part(values.begin() + Offset(i),
                              values.begin() + Offset(i) + shards_[i]->size());
      ASSERT_TRUE(shards_[i]->Run({VectorOp::Open(eval_)}).ok());
      ASSERT_TRUE(shards_[i]->Accumulate(eval_, 0, part).ok());
      ASSERT_TRUE(shards_[i]->Run({VectorOp::Gather(v, 1.0, eval_, {0})}).ok());
    }
  }
  std::vector<double> Get(VecRef v) {
    std::vector<double> all;
    for (const auto& s : shards_) {
      const std::vector<double> part = s->Get(v);
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }
  std::vector<float>& served() { return served_; }
  int64_t total() const { return total_; }

 private:
  int64_t Offset(size_t i) const {
    int64_t o = 0;
    for (size_t k = 0; k < i; ++k) o += shards_[k]->size();
    return o;
  }
  std::vector<std::unique_ptr<LbfgsShard>> shards_;
  std::vector<float> served_;
  int64_t total_ = 0;
  int64_t eval_ = 1000;
};

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(LbfgsDriverTest, TwoLoopMatchesAPlainImplementation) {
  InProcessShards shards({5, 7, 3});
  const int64_t n = shards.total();
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  auto random = [&] {
    std::vector<double> v(n);
    for (double& x : v) x = normal(rng);
    return v;
  };
  LbfgsOptions o;
  o.history = 4;
  LbfgsDriver driver(o, &shards, nullptr);
  // Six pairs into four slots: the oldest two drop out.
  std::deque<std::pair<std::vector<double>, std::vector<double>>> plain;
  for (int k = 0; k < 6; ++k) {
    std::vector<double> s = random(), y = s;
    for (int64_t i = 0; i < n; ++i) y[i] = (1.0 + i % 3) * s[i] + 0.1 * normal(rng);
    const int32_t slot = driver.NextSlot();
    shards.Set(S(slot), s);
    shards.Set(Y(slot), y);
    const auto sf = shards.Get(S(slot)), yf = shards.Get(Y(slot));  // float
    ASSERT_TRUE(*driver.PushPair(Dot(sf, yf), Dot(yf, yf), slot));
    plain.push_back({sf, yf});
    if (plain.size() > 4) plain.pop_front();
  }
  shards.Set(kVecG, random());
  const std::vector<double> g = shards.Get(kVecG);
  absl::StatusOr<double> gd = driver.Direction();
  ASSERT_TRUE(gd.ok()) << gd.status();
  // Nocedal & Wright, Algorithm 7.4, in plain doubles.
  std::vector<double> q = g;
  std::vector<double> alpha(plain.size());
  for (int i = static_cast<int>(plain.size()) - 1; i >= 0; --i) {
    const auto& [s, y] = plain[i];
    alpha[i] = Dot(s, q) / Dot(s, y);
    for (int64_t j = 0; j < n; ++j) q[j] -= alpha[i] * y[j];
  }
  const auto& [sn, yn] = plain.back();
  for (double& v : q) v *= Dot(sn, yn) / Dot(yn, yn);
  for (size_t i = 0; i < plain.size(); ++i) {
    const auto& [s, y] = plain[i];
    const double beta = Dot(y, q) / Dot(s, y);
    for (int64_t j = 0; j < n; ++j) q[j] += (alpha[i] - beta) * s[j];
  }
  const std::vector<double> d = shards.Get(kVecD);
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(d[j], -q[j], 1e-9) << j;
  EXPECT_NEAR(*gd, -Dot(g, q), 1e-9);
  EXPECT_LT(*gd, 0);
}

// f(x) = 1/2 sum a_i (x_i - c_i)^2 + 1/4 sum (x_i - c_i)^4: convex, its
// minimum at c, its value there 0.
class Quartic final : public Objective {
 public:
  explicit Quartic(InProcessShards* shards) : shards_(shards) {
    for (int64_t i = 0; i < shards->total(); ++i) {
      a_.push_back(0.5 + i);
      c_.push_back(std::sin(1.0 + i));
    }
  }
  absl::StatusOr<double> Evaluate(int64_t, VecRef into,
                                  int64_t* examples) override {
    const std::vector<float>& x = shards_->served();
    std::vector<double> g(x.size());
    double f = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = x[i] - c_[i];
      f += 0.5 * a_[i] * e * e + 0.25 * e * e * e * e;
      g[i] = a_[i] * e + e * e * e;
    }
    shards_->Set(into, g);
    *examples = 1;
    return f;
  }
  bool SameBatch(int64_t) const override { return true; }
  const std::vector<double>& c() const { return c_; }

 private:
  InProcessShards* const shards_;
  std::vector<double> a_, c_;
};

TEST(LbfgsDriverTest, ReachesTheMinimumOfAConvexFunction) {
  InProcessShards shards({4, 9, 7});
  Quartic f(&shards);
  LbfgsOptions o;
  o.history = 5;
  o.max_iterations = 60;
  LbfgsDriver driver(o, &shards, &f);
  absl::StatusOr<LbfgsResult> r = driver.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->final_loss, 1e-8);
  for (size_t i = 0; i < f.c().size(); ++i) {
    EXPECT_NEAR(shards.served()[i], f.c()[i], 1e-3) << i;
  }
  EXPECT_GE(r->line_search_evaluations, r->iterations);
  EXPECT_LE(r->iterations, 60);
}

}  // namespace
}  // namespace downpour
