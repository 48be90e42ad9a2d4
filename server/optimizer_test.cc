#include "server/optimizer.h"

#include <cmath>
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

TEST(OptimizerTest, RejectsBadOptions) {
  EXPECT_FALSE(CreateOptimizer({"adam", 0.1f}).ok());
  EXPECT_NE(CreateOptimizer({"adam", 0.1f}).status().message().find("adagrad"),
            std::string::npos);
  EXPECT_FALSE(CreateOptimizer({"sgd", 0.0f}).ok());
  EXPECT_FALSE(CreateOptimizer({"sgd", NAN}).ok());
  EXPECT_FALSE(CreateOptimizer({"momentum", 0.1f, 1.5f}).ok());
}

}  // namespace
}  // namespace downpour
