#include "worker/shard_incarnations.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "worker/shard_map_test_util.h"

namespace downpour {
namespace {

// Collects the log lines.
class Lines {
 public:
  ShardIncarnations::LogFn Sink() {
    return [this](const std::string& line) {
      absl::MutexLock l(&mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    absl::MutexLock l(&mu_);
    out.swap(lines_);
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

TEST(ShardIncarnationsTest, FirstReplyIsNoRestartAndZeroIsIgnored) {
  Lines lines;
  ShardIncarnations inc(3, 2, lines.Sink());
  EXPECT_EQ(inc.current(0), 0u);
  inc.Saw(0, 0);
  EXPECT_EQ(inc.current(0), 0u);
  inc.Saw(0, 0xa);
  inc.Saw(0, 0);  // A server that sends none.
  EXPECT_EQ(inc.current(0), 0xau);
  EXPECT_EQ(inc.current(1), 0u);
  EXPECT_EQ(inc.restarts_seen(), 0);
  EXPECT_TRUE(lines.Take().empty());
}

TEST(ShardIncarnationsTest, ANewIncarnationIsARestartLoggedOnce) {
  Lines lines;
  ShardIncarnations inc(3, 2, lines.Sink());
  inc.Saw(0, 0xa);
  inc.Saw(0, 0xb);
  inc.Saw(0, 0xb);
  EXPECT_EQ(inc.current(0), 0xbu);
  EXPECT_EQ(lines.Take(),
            std::vector<std::string>{
                "worker 3: shard 0 restarted (incarnation 000000000000000a -> "
                "000000000000000b); re-pulling its parameters (1 shard "
                "restart seen)"});
  inc.Saw(1, 0x0123456789abcdefull);
  inc.Saw(1, 0xfedcba9876543210ull);
  EXPECT_EQ(lines.Take(),
            std::vector<std::string>{
                "worker 3: shard 1 restarted (incarnation 0123456789abcdef -> "
                "fedcba9876543210); re-pulling its parameters (2 shard "
                "restarts seen)"});
  EXPECT_EQ(inc.restarts_seen(), 2);
}

TEST(ShardIncarnationsTest, ALateReplyOfAReplacedProcessIsNoRestart) {
  Lines lines;
  ShardIncarnations inc(0, 1, lines.Sink());
  inc.Saw(0, 1);
  inc.Saw(0, 2);
  inc.Saw(0, 1);  // Late.
  EXPECT_EQ(inc.current(0), 2u);
  inc.Saw(0, 3);
  inc.Saw(0, 2);
  inc.Saw(0, 1);
  EXPECT_EQ(inc.current(0), 3u);
  EXPECT_EQ(inc.restarts_seen(), 2);
  EXPECT_EQ(lines.Take().size(), 2u);
}

TEST(ShardIncarnationsTest, StalePartsAreThoseAPreviousProcessAcknowledged) {
  ShardIncarnations inc(0, 2, [](const std::string&) {});
  const std::vector<Part> parts = PartsOfShards({0, 0, 0, 1, 1});
  inc.Saw(0, 10);
  inc.Saw(1, 20);
  EXPECT_TRUE(inc.StaleParts(parts, {10, 10, 10, 20, 0}).empty());
  inc.Saw(0, 11);
  EXPECT_EQ(inc.StaleParts(parts, {10, 10, 11, 20, 0}),
            (std::vector<int>{0, 1}));
}

TEST(ShardIncarnationsTest, StalePartsAreSentAgainUntilNoneIsLeft) {
  Lines lines;
  ShardIncarnations inc(3, 2, lines.Sink());
  const std::vector<Part> parts = PartsOfShards({0, 0, 0, 1});
  // Parts 0 and 1 reached shard 0's old process, part 2 its new one.
  std::vector<uint64_t> part_inc = {10, 10, 11, 20};
  for (size_t i = 0; i < parts.size(); ++i) inc.Saw(parts[i].shard, part_inc[i]);
  lines.Take();
  std::vector<std::vector<int>> sent;
  const absl::Status s = inc.ResendStaleParts(
      7, parts, &part_inc, [&](const std::vector<int>& stale) {
        sent.push_back(stale);
        for (int i : stale) {  // Each acknowledged by the new process.
          inc.Saw(parts[i].shard, 11);
          part_inc[i] = 11;
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(sent, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_EQ(lines.Take(),
            std::vector<std::string>{
                "worker 3: 2 part(s) of push 7 reached a shard's previous "
                "process before it restarted; sending them again"});
  // Nothing stale: nothing sent, nothing logged.
  EXPECT_TRUE(inc.ResendStaleParts(8, parts, &part_inc,
                                   [&](const std::vector<int>& stale) {
                                     sent.push_back(stale);
                                     return absl::OkStatus();
                                   })
                  .ok());
  EXPECT_EQ(sent.size(), 1u);
  EXPECT_TRUE(lines.Take().empty());
}

TEST(ShardIncarnationsTest, ResendingStopsAfterThreeRoundsOrAnError) {
  ShardIncarnations inc(0, 1, [](const std::string&) {});
  const std::vector<Part> parts = PartsOfShards({0, 0});
  std::vector<uint64_t> part_inc = {1, 2};
  inc.Saw(0, 1);
  inc.Saw(0, 2);
  // A shard that keeps restarting: the part never reaches a current process.
  int rounds = 0;
  EXPECT_TRUE(inc.ResendStaleParts(1, parts, &part_inc,
                                   [&](const std::vector<int>&) {
                                     ++rounds;
                                     return absl::OkStatus();
                                   })
                  .ok());
  EXPECT_EQ(rounds, 3);
  rounds = 0;
  EXPECT_EQ(inc.ResendStaleParts(2, parts, &part_inc,
                                 [&](const std::vector<int>&) {
                                   ++rounds;
                                   return absl::UnavailableError("down");
                                 }),
            absl::UnavailableError("down"));
  EXPECT_EQ(rounds, 1);
}

TEST(ShardIncarnationsTest, RepliesOnManyThreadsCountOneRestart) {
  Lines lines;
  ShardIncarnations inc(0, 1, lines.Sink());
  inc.Saw(0, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) inc.Saw(0, k % 2 == 0 ? 2 : 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(inc.current(0), 2u);
  EXPECT_EQ(inc.restarts_seen(), 1);
  EXPECT_EQ(lines.Take().size(), 1u);
}

}  // namespace
}  // namespace downpour
