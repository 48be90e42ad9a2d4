#include "worker/nn/conv_algo_choice.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

constexpr int kFma = 2;     // Stand-ins for cudnnMathType_t values.
constexpr int kTensor = 1;

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

RankedAlgo Entry(int algo, bool ok, bool deterministic, bool fma = true) {
  return RankedAlgo{algo, ok, deterministic, fma, fma ? kFma : kTensor};
}

ConvAlgoRules Rules(size_t limit, bool transform = false, bool tf32 = false) {
  ConvAlgoRules r;
  r.workspace_limit = limit;
  r.allow_transform = transform;
  r.allow_tf32 = tf32;
  r.fallback_math_type = kFma;
  return r;
}

ConvAlgoRules Deterministic(ConvAlgoRules r) {
  r.deterministic = true;
  return r;
}

TEST(ConvAlgoChoiceTest, TakesTheRankingsFirstUsableEntry) {
  Env e;
  e.workspace = {{1, 10}, {2, 20}, {3, 30}};
  const std::vector<RankedAlgo> ranking = {
      Entry(1, true, false), Entry(2, true, true), Entry(3, true, true)};
  auto c = ChooseConvAlgo(ranking, {}, Rules(100), {}, e.is_transform, e.query);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->algo, 1);
  EXPECT_EQ(c->workspace, 10u);
}

TEST(ConvAlgoChoiceTest, DeterministicPrefersDeterministicInRankOrder) {
  Env e;
  e.workspace = {{1, 10}, {2, 20}, {3, 30}};
  const std::vector<RankedAlgo> ranking = {
      Entry(1, true, false), Entry(2, true, true), Entry(3, true, true)};
  auto c = ChooseConvAlgo(ranking, {}, Deterministic(Rules(100)), {},
                          e.is_transform, e.query);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->algo, 2);
  EXPECT_EQ(c->workspace, 20u);
  EXPECT_EQ(c->math_type, kFma);
}

TEST(ConvAlgoChoiceTest, FallsBackToNonDeterministicThenToFallbacks) {
  Env e;
  e.workspace = {{1, 10}, {4, 0}};
  auto c = ChooseConvAlgo({Entry(1, true, false), Entry(2, true, true)}, {4},
                          Deterministic(Rules(100)), {}, e.is_transform,
                          e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 1);  // 2 fails its workspace query.
  c = ChooseConvAlgo({Entry(1, false, true)}, {5, 4}, Rules(100), {},
                     e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 4);  // 1's entry failed; fallback 5 has no workspace.
  EXPECT_EQ(c->math_type, kFma);
}

TEST(ConvAlgoChoiceTest, SkipsTransformsUnlessAllowedAndRespectsTheLimit) {
  Env e;
  e.workspace = {{6, 1}, {2, 500}, {3, 50}};
  const std::vector<RankedAlgo> ranking = {
      Entry(6, true, true), Entry(2, true, true), Entry(3, true, true)};
  auto c = ChooseConvAlgo(ranking, {}, Rules(100), {}, e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 3);  // 6 is a transform, 2 needs too much.
  c = ChooseConvAlgo(ranking, {}, Rules(100, true), {}, e.is_transform,
                     e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 6);
}

// Entries ranked for tensor-op math are not FMA kernels.
TEST(ConvAlgoChoiceTest, KeepsOnlyFmaEntriesUnlessTf32IsAllowed) {
  Env e;
  e.workspace = {{1, 0}, {2, 0}};
  const std::vector<RankedAlgo> ranking = {Entry(1, true, true, /*fma=*/false),
                                           Entry(2, true, true, /*fma=*/true)};
  auto c = ChooseConvAlgo(ranking, {}, Rules(100), {}, e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 2);
  EXPECT_EQ(c->math_type, kFma);
  c = ChooseConvAlgo(ranking, {}, Rules(100, false, /*tf32=*/true), {},
                     e.is_transform, e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 1);
  EXPECT_EQ(c->math_type, kTensor);  // Run with the entry's own math type.
  // Only tensor-op entries and no fallback: nothing usable without TF32.
  c = ChooseConvAlgo({Entry(1, true, true, false)}, {}, Rules(100), {},
                     e.is_transform, e.query);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ConvAlgoChoiceTest, NeverChoosesABadAlgorithm) {
  Env e;
  e.workspace = {{1, 0}, {2, 0}, {4, 0}};
  const std::vector<RankedAlgo> ranking = {Entry(1, true, true),
                                           Entry(2, true, true)};
  auto c = ChooseConvAlgo(ranking, {4}, Rules(100), {1}, e.is_transform,
                          e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 2);
  c = ChooseConvAlgo(ranking, {4}, Rules(100), {1, 2}, e.is_transform,
                     e.query);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, 4);
  c = ChooseConvAlgo(ranking, {4}, Rules(100), {1, 2, 4}, e.is_transform,
                     e.query);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ConvAlgoChoiceTest, NothingUsableIsUnimplemented) {
  Env e;
  auto c = ChooseConvAlgo({Entry(1, true, true)}, {2}, Rules(64), {},
                          e.is_transform, e.query);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.status().message(),
            "no usable cuDNN algorithm among 1 ranked and 1 fallback "
            "candidates (0 marked bad) within the workspace limit of 64 "
            "bytes");
}

// The retry loop over a fake "device" whose algorithms fail as scripted.
struct RetryEnv {
  Env env;
  std::vector<RankedAlgo> ranking;
  std::vector<int> fallbacks;
  std::map<int, absl::Status> fails;  // algo -> what running it returns.
  std::vector<int> ran;
  std::vector<std::string> logged;
  int chooses = 0;

  absl::Status Run(AlgoSlot* slot) {
    return RunWithAlgoRetry(
        slot,
        [&](const std::set<int>& bad) {
          ++chooses;
          return ChooseConvAlgo(ranking, fallbacks, Rules(100), bad,
                                env.is_transform, env.query);
        },
        [&](const ConvAlgoChoice& c) {
          ran.push_back(c.algo);
          auto it = fails.find(c.algo);
          return it == fails.end() ? absl::OkStatus() : it->second;
        },
        [&](const std::string& m) { logged.push_back(m); });
  }
};

TEST(RunWithAlgoRetryTest, MarksAFailingAlgorithmBadAndTakesTheNext) {
  RetryEnv r;
  r.env.workspace = {{1, 0}, {2, 0}, {3, 0}};
  r.ranking = {Entry(1, true, true), Entry(2, true, true),
               Entry(3, true, true)};
  r.fails[1] = absl::UnimplementedError("CUDNN_STATUS_NOT_SUPPORTED");
  r.fails[2] = absl::ResourceExhaustedError("out of memory");
  AlgoSlot slot;
  ASSERT_TRUE(r.Run(&slot).ok());
  EXPECT_EQ(r.ran, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(slot.bad, (std::set<int>{1, 2}));
  ASSERT_EQ(r.logged.size(), 2u);
  EXPECT_NE(r.logged[0].find("algorithm 1: CUDNN_STATUS_NOT_SUPPORTED"),
            std::string::npos);
  // The next call reuses the working choice without asking again.
  const int chooses = r.chooses;
  ASSERT_TRUE(r.Run(&slot).ok());
  EXPECT_EQ(r.ran.back(), 3);
  EXPECT_EQ(r.chooses, chooses);
}

TEST(RunWithAlgoRetryTest, OtherErrorsAreNotRetried) {
  RetryEnv r;
  r.env.workspace = {{1, 0}, {2, 0}};
  r.ranking = {Entry(1, true, true), Entry(2, true, true)};
  r.fails[1] = absl::InternalError("illegal address");
  AlgoSlot slot;
  const absl::Status s = r.Run(&slot);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(r.ran, (std::vector<int>{1}));
  EXPECT_TRUE(slot.bad.empty());
}

TEST(RunWithAlgoRetryTest, AllFailingNamesEveryFailure) {
  RetryEnv r;
  r.env.workspace = {{1, 0}, {4, 0}};
  r.ranking = {Entry(1, true, true)};
  r.fallbacks = {4};
  r.fails[1] = absl::UnimplementedError("not supported");
  r.fails[4] = absl::ResourceExhaustedError("no memory");
  AlgoSlot slot;
  const absl::Status s = r.Run(&slot);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("algorithm 1: not supported; algorithm 4: no "
                             "memory"),
            std::string::npos)
      << s;
  EXPECT_EQ(r.ran, (std::vector<int>{1, 4}));
}

TEST(RunWithAlgoRetryTest, NothingToChooseReturnsTheChoiceError) {
  RetryEnv r;
  AlgoSlot slot;
  const absl::Status s = r.Run(&slot);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(r.ran.empty());
}

}  // namespace
}  // namespace downpour
