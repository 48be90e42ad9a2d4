#include "server/replication.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

// The other process, as the test makes it answer.
struct PeerScript {
  absl::Mutex mu;
  absl::Status forward ABSL_GUARDED_BY(mu);
  absl::Status heartbeat ABSL_GUARDED_BY(mu);
  bool refuses ABSL_GUARDED_BY(mu) = false;
  PeerState hello ABSL_GUARDED_BY(mu);
  int forwards ABSL_GUARDED_BY(mu) = 0;
};

class FakePeer : public ReplicaPeer {
 public:
  explicit FakePeer(PeerScript* s) : s_(s) {}
  absl::StatusOr<PeerState> Hello(absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    return s_->hello;
  }
  absl::StatusOr<JoinState> Join(absl::Duration) override {
    JoinState st;
    st.epoch = 7;
    st.server_incarnation = 99;
    return st;
  }
  absl::Status Forward(uint64_t, ForwardKind, const std::string&,
                       absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    ++s_->forwards;
    return s_->forward;
  }
  absl::Status Heartbeat(uint64_t, absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    return s_->heartbeat;
  }
  bool Refuses(absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    return s_->refuses;
  }
  std::string address() const override { return "peer:1"; }

 private:
  PeerScript* s_;
};

struct Fixture {
  PeerScript script;
  std::atomic<int> applied{0};
  std::atomic<int> deposed{0};
  std::vector<std::string> log;
  absl::Mutex log_mu;

  std::unique_ptr<ShardReplica> Make(
      ReplicaRole role, absl::Duration lease = absl::Milliseconds(200)) {
    ReplicaShard shard;
    shard.apply = [this](ForwardKind, const std::string&) {
      ++applied;
      return absl::OkStatus();
    };
    shard.export_state = []() -> absl::StatusOr<JoinState> {
      return JoinState();
    };
    shard.import_state = [](const JoinState&) { return absl::OkStatus(); };
    ReplicaOptions o;
    o.start_role = role;
    o.lease = lease;
    o.log = [this](const std::string& m) {
      absl::MutexLock l(&log_mu);
      log.push_back(m);
    };
    o.on_deposed = [this] { ++deposed; };
    return *ShardReplica::Create(std::move(o), std::make_unique<FakePeer>(&script),
                                 std::move(shard));
  }
};

absl::Status Change(ShardReplica* r, std::atomic<int>* ran) {
  return r->ReplicateAndApply(ForwardKind::kPush, "x", [ran] {
    ++*ran;
    return absl::OkStatus();
  });
}

TEST(ReplicationTest, PrimaryAloneAppliesWithoutForwarding) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kPrimary);
  std::atomic<int> ran{0};
  EXPECT_TRUE(r->AdmitClient().ok());
  EXPECT_TRUE(Change(r.get(), &ran).ok());
  EXPECT_EQ(ran.load(), 1);
  absl::MutexLock l(&f.script.mu);
  EXPECT_EQ(f.script.forwards, 0);
}

TEST(ReplicationTest, ForwardsOnceAStandbyJoined) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kPrimary);
  ASSERT_TRUE(r->OnJoin().ok());
  std::atomic<int> ran{0};
  EXPECT_TRUE(Change(r.get(), &ran).ok());
  EXPECT_EQ(ran.load(), 1);
  absl::MutexLock l(&f.script.mu);
  EXPECT_EQ(f.script.forwards, 1);
}

TEST(ReplicationTest, StandbyGoneMeansAlone) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kPrimary);
  ASSERT_TRUE(r->OnJoin().ok());
  {
    absl::MutexLock l(&f.script.mu);
    f.script.forward = absl::UnavailableError("connection refused");
    f.script.refuses = true;
  }
  std::atomic<int> ran{0};
  EXPECT_TRUE(Change(r.get(), &ran).ok());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(r->role(), ReplicaRole::kPrimary);
  EXPECT_FALSE(r->Hello().has_standby);
  absl::MutexLock l(&f.log_mu);
  ASSERT_FALSE(f.log.empty());
  EXPECT_NE(f.log.back().find("running without a standby"), std::string::npos);
}

TEST(ReplicationTest, UnreachableStandbyFencesThePrimary) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kPrimary);
  ASSERT_TRUE(r->OnJoin().ok());
  {
    absl::MutexLock l(&f.script.mu);
    f.script.forward = absl::DeadlineExceededError("timeout");
    f.script.heartbeat = absl::DeadlineExceededError("timeout");
  }
  std::atomic<int> ran{0};
  EXPECT_TRUE(absl::IsUnavailable(Change(r.get(), &ran)));
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(r->role(), ReplicaRole::kFenced);
  EXPECT_TRUE(absl::IsUnavailable(r->AdmitClient()));
  // Reachable again at its epoch: serving again.
  {
    absl::MutexLock l(&f.script.mu);
    f.script.forward = absl::OkStatus();
    f.script.heartbeat = absl::OkStatus();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (r->role() != ReplicaRole::kPrimary && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(r->role(), ReplicaRole::kPrimary);
  EXPECT_TRUE(Change(r.get(), &ran).ok());
}

TEST(ReplicationTest, HigherEpochDeposesThePrimary) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kPrimary);
  ASSERT_TRUE(r->OnJoin().ok());
  {
    absl::MutexLock l(&f.script.mu);
    f.script.forward = absl::FailedPreconditionError("epoch 2");
  }
  std::atomic<int> ran{0};
  EXPECT_TRUE(absl::IsUnavailable(Change(r.get(), &ran)));
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(f.deposed.load(), 1);
  EXPECT_TRUE(absl::IsUnavailable(r->AdmitClient()));
}

TEST(ReplicationTest, StandbyAppliesThenPromotesAfterTheLease) {
  Fixture f;
  {
    absl::MutexLock l(&f.script.mu);
    f.script.hello.role = ReplicaRole::kPrimary;
  }
  auto r = f.Make(ReplicaRole::kStandby);
  EXPECT_TRUE(absl::IsUnavailable(r->AdmitClient()));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!r->Hello().attached && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(r->Hello().attached);
  EXPECT_EQ(r->epoch(), 7u);
  EXPECT_EQ(r->server_incarnation(), 99u);
  EXPECT_TRUE(r->OnForward(7, ForwardKind::kPush, "x").ok());
  EXPECT_EQ(f.applied.load(), 1);
  // No word for a lease (the peer's address does not refuse): promoted.
  while (r->role() != ReplicaRole::kPrimary && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(r->role(), ReplicaRole::kPrimary);
  EXPECT_EQ(r->epoch(), 8u);
  EXPECT_TRUE(r->AdmitClient().ok());
  // The old primary's forwards are refused from then on.
  EXPECT_TRUE(absl::IsFailedPrecondition(r->OnForward(7, ForwardKind::kPush, "x")));
  EXPECT_TRUE(absl::IsFailedPrecondition(r->OnHeartbeat(7)));
  EXPECT_EQ(f.applied.load(), 1);
}

TEST(ReplicationTest, StandbyPromotesAtOnceWhenThePrimaryIsGone) {
  Fixture f;
  {
    absl::MutexLock l(&f.script.mu);
    f.script.hello.role = ReplicaRole::kPrimary;
  }
  // A long lease: the promotion below comes from the refusal, after two
  // heartbeats (0.4 s), not from the lease.
  auto r = f.Make(ReplicaRole::kStandby, absl::Seconds(2));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!r->Hello().attached && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(r->Hello().attached);
  {
    absl::MutexLock l(&f.script.mu);
    f.script.refuses = true;
  }
  while (r->role() != ReplicaRole::kPrimary && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(r->role(), ReplicaRole::kPrimary);
  absl::MutexLock l(&f.log_mu);
  ASSERT_FALSE(f.log.empty());
  EXPECT_NE(f.log.back().find("refuses connections"), std::string::npos)
      << f.log.back();
}

TEST(ReplicationTest, UnjoinedStandbyTakesNoForwards) {
  Fixture f;
  auto r = f.Make(ReplicaRole::kStandby);  // Hello says "starting": no join.
  EXPECT_TRUE(absl::IsAborted(r->OnForward(1, ForwardKind::kPush, "x")));
  EXPECT_TRUE(absl::IsAborted(r->OnHeartbeat(1)));
  EXPECT_EQ(f.applied.load(), 0);
}

}  // namespace
}  // namespace downpour
