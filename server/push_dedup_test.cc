#include "server/push_dedup.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

PushClaim MustClaim(PushDedupTable& t, PushId id) {
  absl::StatusOr<PushClaim> c = t.Claim(id);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : PushClaim{};
}

TEST(PushDedupTableTest, OnePartPushIsNewOnceThenDuplicate) {
  PushDedupTable t;
  PushClaim c = MustClaim(t, {0, 1, 0, 1});
  EXPECT_FALSE(c.duplicate);
  EXPECT_TRUE(c.completes_push);
  EXPECT_TRUE(MustClaim(t, {0, 1, 0, 1}).duplicate);
  // Workers are independent.
  EXPECT_FALSE(MustClaim(t, {1, 1, 0, 1}).duplicate);
  // A newer seq is new, an older one a retry.
  EXPECT_FALSE(MustClaim(t, {0, 3, 0, 1}).duplicate);
  EXPECT_TRUE(MustClaim(t, {0, 2, 0, 1}).duplicate);
  EXPECT_TRUE(MustClaim(t, {0, 1, 0, 1}).duplicate);
}

TEST(PushDedupTableTest, PartsCompleteThePushOnceEach) {
  PushDedupTable t;
  PushClaim a = MustClaim(t, {4, 7, 2, 3});
  EXPECT_FALSE(a.duplicate);
  EXPECT_FALSE(a.completes_push);
  EXPECT_TRUE(MustClaim(t, {4, 7, 2, 3}).duplicate);
  EXPECT_FALSE(MustClaim(t, {4, 7, 0, 3}).completes_push);
  PushClaim last = MustClaim(t, {4, 7, 1, 3});
  EXPECT_FALSE(last.duplicate);
  EXPECT_TRUE(last.completes_push);
  EXPECT_TRUE(MustClaim(t, {4, 7, 1, 3}).duplicate);
}

TEST(PushDedupTableTest, PartCountMustAgreeWithinASeqAndRecordsNothing) {
  PushDedupTable t;
  MustClaim(t, {0, 1, 0, 2});
  absl::StatusOr<PushClaim> bad = t.Claim({0, 1, 1, 3});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("3 parts"), std::string::npos);
  // The refused part can still be delivered with the right count.
  PushClaim c = MustClaim(t, {0, 1, 1, 2});
  EXPECT_FALSE(c.duplicate);
  EXPECT_TRUE(c.completes_push);
}

TEST(PushDedupTableTest, ConcurrentRetriesClaimEachPartExactlyOnce) {
  PushDedupTable t;
  constexpr int kThreads = 8, kSeqs = 200;
  std::vector<int> fresh(kThreads, 0), completes(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int seq = 1; seq <= kSeqs; ++seq) {
        // Every thread delivers every part of every seq of worker 0.
        for (int part = 0; part < 2; ++part) {
          absl::StatusOr<PushClaim> c = t.Claim({0, seq, part, 2});
          ASSERT_TRUE(c.ok());
          fresh[i] += c->duplicate ? 0 : 1;
          completes[i] += c->completes_push ? 1 : 0;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  int total_fresh = 0, total_completes = 0;
  for (int i = 0; i < kThreads; ++i) {
    total_fresh += fresh[i];
    total_completes += completes[i];
  }
  // Threads race ahead of each other, so a part of an older seq may be
  // refused before it was ever claimed; never is one claimed twice.
  EXPECT_LE(total_fresh, 2 * kSeqs);
  EXPECT_LE(total_completes, kSeqs);
  EXPECT_GE(total_completes, 1);
}

// A restarted worker (new incarnation, same id) starts a new sequence; a retry
// from the same process stays a retry.
TEST(PushDedupTableTest, NewIncarnationStartsANewSequence) {
  PushDedupTable t;
  for (int64_t seq = 1; seq <= 100; ++seq) {
    EXPECT_FALSE(MustClaim(t, {0, seq, 0, 1, 111}).duplicate);
  }
  EXPECT_TRUE(MustClaim(t, {0, 100, 0, 1, 111}).duplicate);
  PushClaim first = MustClaim(t, {0, 1, 0, 1, 222});
  EXPECT_FALSE(first.duplicate);
  EXPECT_TRUE(first.new_incarnation);
  EXPECT_TRUE(first.completes_push);
  EXPECT_TRUE(MustClaim(t, {0, 1, 0, 1, 222}).duplicate);
  PushClaim second = MustClaim(t, {0, 2, 0, 1, 222});
  EXPECT_FALSE(second.duplicate);
  EXPECT_FALSE(second.new_incarnation);
  // The replaced process is refused, loudly.
  absl::StatusOr<PushClaim> old = t.Claim({0, 101, 0, 1, 111});
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.status().message().find("replaced"), std::string::npos);
  // Other workers are untouched.
  EXPECT_FALSE(MustClaim(t, {1, 1, 0, 1, 111}).duplicate);
}

TEST(PushDedupTableTest, ExportImportKeepsRetriesAndIncarnations) {
  PushDedupTable t;
  MustClaim(t, {0, 5, 0, 1, 7});
  MustClaim(t, {0, 1, 0, 1, 8});
  MustClaim(t, {2, 3, 1, 2, 9});
  PushDedupTable u;
  ASSERT_TRUE(u.Import(t.Export()).ok());
  EXPECT_TRUE(MustClaim(u, {0, 1, 0, 1, 8}).duplicate);
  EXPECT_TRUE(MustClaim(u, {2, 3, 1, 2, 9}).duplicate);
  EXPECT_TRUE(MustClaim(u, {2, 3, 0, 2, 9}).completes_push);
  EXPECT_FALSE(u.Claim({0, 6, 0, 1, 7}).ok());
  DedupEntry bad;
  bad.seq = 2;
  bad.num_parts = 3;
  EXPECT_FALSE(u.Import({bad}).ok());
}

TEST(PushDedupTest, SeqFarAheadOfTheWorkersIsRefusedAndChangesNothing) {
  PushDedupTable t;
  ASSERT_TRUE(t.Claim(PushId{0, 5, 0, 1, 9}).ok());
  // 2^62 would make every later push of worker 0 look like a retry.
  auto r = t.Claim(PushId{0, int64_t{1} << 62, 0, 1, 9});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = t.Claim(PushId{0, 5 + PushDedupTable::kMaxSeqJump + 1, 0, 1, 9});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Also with a new incarnation, which is not switched to.
  r = t.Claim(PushId{0, int64_t{1} << 62, 0, 1, 10});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Worker 0's next push still applies.
  r = t.Claim(PushId{0, 6, 0, 1, 9});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->duplicate);
  EXPECT_FALSE(r->new_incarnation);
  // A jump within the bound (pushes a restored shard missed) is fine.
  EXPECT_TRUE(t.Claim(PushId{0, 6 + 5000, 0, 1, 9}).ok());
}

}  // namespace
}  // namespace downpour
