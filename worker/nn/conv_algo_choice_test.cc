#include "worker/nn/conv_algo_choice.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

// Algorithms 6 and 7 play FFT/Winograd; workspaces come from a table (a
// missing entry is a failed query).
struct Env {
  std::map<int, size_t> workspace;
  std::function<bool(int)> is_transform = [](int a) { return a >= 6; };
  std::function<bool(int, size_t*)> query = [this](int a, size_t* bytes) {
    auto it = workspace.find(a);
    if (it == workspace.end()) return false;
    *bytes = it->second;
    return true;
  };
};

TEST(ConvAlgoChoiceTest, PrefersDeterministicInRankOrder) {
  Env e;
  e.workspace = {{1, 10}, {2, 20}, {3, 30}};
  const std::vector<RankedAlgo> ranking = {
      {1, true, false}, {2, true, true}, {3, true, true}};
  auto c = ChooseConvAlgo(ranking, {}, false, 100, e.is_transform, e.query);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->algo, 2);
  EXPECT_EQ(c->workspace, 20u);
}

TEST(ConvAlgoChoiceTest, FallsBackToNonDeterministicThenToFallbacks) {
  Env e;
  e.workspace = {{1, 10}, {4, 0}};
  auto c = ChooseConvAlgo({{1, true, false}, {2, true, true}}, {4}, false, 100,
                          e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 1);  // 2 fails its workspace query.
  c = ChooseConvAlgo({{1, false, true}}, {5, 4}, false, 100, e.is_transform,
                     e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 4);  // 1's entry failed; fallback 5 has no workspace.
}

TEST(ConvAlgoChoiceTest, SkipsTransformsUnlessAllowedAndRespectsTheLimit) {
  Env e;
  e.workspace = {{6, 1}, {2, 500}, {3, 50}};
  const std::vector<RankedAlgo> ranking = {
      {6, true, true}, {2, true, true}, {3, true, true}};
  auto c = ChooseConvAlgo(ranking, {}, false, 100, e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 3);  // 6 is a transform, 2 needs too much.
  c = ChooseConvAlgo(ranking, {}, true, 100, e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 6);
}

TEST(ConvAlgoChoiceTest, NothingUsableIsUnimplemented) {
  Env e;
  auto c = ChooseConvAlgo({{1, true, true}}, {2}, false, 64, e.is_transform,
                          e.query);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.status().message(),
            "no usable cuDNN algorithm among 1 ranked and 1 fallback "
            "candidates within the workspace limit of 64 bytes");
}

}  // namespace
}  // namespace downpour
