#include "server/replication.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/shard_snapshot.h"
#include "server/standby_shard.h"
#include "server/store_test_util.h"

namespace downpour {
namespace {

// The other process, as the test makes it answer.
struct PeerScript {
  absl::Mutex mu;
  absl::Status forward ABSL_GUARDED_BY(mu);
  absl::Status heartbeat ABSL_GUARDED_BY(mu);
  bool refuses ABSL_GUARDED_BY(mu) = false;
  PeerState hello ABSL_GUARDED_BY(mu);
  absl::Status join ABSL_GUARDED_BY(mu);
  int forwards ABSL_GUARDED_BY(mu) = 0;
  int joins ABSL_GUARDED_BY(mu) = 0;
};

class FakePeer : public ReplicaPeer {
 public:
  explicit FakePeer(PeerScript* s) : s_(s) {}
  absl::StatusOr<PeerState> Hello(absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    return s_->hello;
  }
  absl::StatusOr<JoinState> Join(absl::Duration) override {
    absl::MutexLock l(&s_->mu);
    ++s_->joins;
    if (!s_->join.ok()) return s_->join;
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
  // The standby may have applied it: applied here too, not acknowledged.
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(r->role(), ReplicaRole::kFenced);
  EXPECT_TRUE(absl::IsUnavailable(r->AdmitClient()));
  int forwards_before = 0;
  {
    absl::MutexLock l(&f.script.mu);
    forwards_before = f.script.forwards;
  }
  // Reachable again at its epoch: the change of unknown fate is forwarded
  // again, then it serves again.
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
  {
    absl::MutexLock l(&f.script.mu);
    EXPECT_EQ(f.script.forwards, forwards_before + 1);
  }
  EXPECT_TRUE(Change(r.get(), &ran).ok());
  EXPECT_EQ(ran.load(), 2);
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

TEST(ReplicationTest, AbandonedForwardIsNotApplied) {
  Fixture f;
  {
    absl::MutexLock l(&f.script.mu);
    f.script.hello.role = ReplicaRole::kPrimary;
  }
  auto r = f.Make(ReplicaRole::kStandby, absl::Seconds(2));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!r->Hello().attached && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(r->Hello().attached);
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      r->OnForward(7, ForwardKind::kPush, "x", [] { return true; })));
  EXPECT_EQ(f.applied.load(), 0);
  EXPECT_TRUE(
      r->OnForward(7, ForwardKind::kPush, "x", [] { return false; }).ok());
  EXPECT_EQ(f.applied.load(), 1);
}

TEST(ReplicationTest, JoinOverTheLimitTakesNoStandby) {
  Fixture f;
  // A primary whose snapshot is 100 bytes.
  ReplicaShard shard;
  shard.apply = [](ForwardKind, const std::string&) { return absl::OkStatus(); };
  shard.export_state = []() -> absl::StatusOr<JoinState> {
    JoinState st;
    st.declared = true;
    st.snapshot = std::string(100, 'x');
    return st;
  };
  shard.import_state = [](const JoinState&) { return absl::OkStatus(); };
  ReplicaOptions o;
  o.lease = absl::Milliseconds(200);
  o.log = [](const std::string&) {};
  auto big = *ShardReplica::Create(
      std::move(o), std::make_unique<FakePeer>(&f.script), std::move(shard));
  EXPECT_TRUE(absl::IsResourceExhausted(big->OnJoin(99).status()));
  EXPECT_FALSE(big->Hello().has_standby);
  EXPECT_TRUE(big->OnJoin(100).ok());
  EXPECT_TRUE(big->Hello().has_standby);
}

TEST(ReplicationTest, FailedJoinsBackOff) {
  Fixture f;
  {
    absl::MutexLock l(&f.script.mu);
    f.script.hello.role = ReplicaRole::kPrimary;
    f.script.join = absl::ResourceExhaustedError("too big");
  }
  // Ticks every 10 ms: without a back-off, ~60 joins in 0.6 s.
  auto r = f.Make(ReplicaRole::kStandby);
  absl::SleepFor(absl::Milliseconds(600));
  absl::MutexLock l(&f.script.mu);
  EXPECT_GE(f.script.joins, 2);
  EXPECT_LE(f.script.joins, 8);
}

TEST(ReplicationTest, StandbyUnheardSinceItsJoinJoinsAgainInsteadOfPromoting) {
  Fixture f;
  {
    absl::MutexLock l(&f.script.mu);
    f.script.hello.role = ReplicaRole::kPrimary;
  }
  auto r = f.Make(ReplicaRole::kStandby);  // Lease 200 ms.
  absl::SleepFor(absl::Milliseconds(700));
  EXPECT_EQ(r->role(), ReplicaRole::kStandby);
  absl::MutexLock l(&f.script.mu);
  EXPECT_GE(f.script.joins, 2);
}

// Two replicas calling each other directly.
class LoopbackPeer : public ReplicaPeer {
 public:
  explicit LoopbackPeer(std::atomic<ShardReplica*>* to) : to_(to) {}
  absl::StatusOr<PeerState> Hello(absl::Duration) override {
    ShardReplica* r = to_->load();
    if (r == nullptr) return absl::UnavailableError("starting");
    return r->Hello();
  }
  absl::StatusOr<JoinState> Join(absl::Duration) override {
    ShardReplica* r = to_->load();
    if (r == nullptr) return absl::UnavailableError("starting");
    return r->OnJoin();
  }
  absl::Status Forward(uint64_t epoch, ForwardKind kind,
                       const std::string& request, absl::Duration) override {
    ShardReplica* r = to_->load();
    if (r == nullptr) return absl::UnavailableError("starting");
    return r->OnForward(epoch, kind, request);
  }
  absl::Status Heartbeat(uint64_t epoch, absl::Duration) override {
    ShardReplica* r = to_->load();
    if (r == nullptr) return absl::UnavailableError("starting");
    return r->OnHeartbeat(epoch);
  }
  bool Refuses(absl::Duration) override { return false; }
  std::string address() const override { return "loopback:1"; }

 private:
  std::atomic<ShardReplica*>* to_;
};

TEST(ReplicationTest, SlowJoinNeitherLeavesThePrimaryAloneNorPromotes) {
  // Longer than the fixture's: the test asserts that nothing happened for
  // three leases, which a heartbeat thread stalled for one lease (TSan on a
  // loaded machine) would break.
  const absl::Duration lease = absl::Milliseconds(500);
  std::atomic<ShardReplica*> primary{nullptr}, standby{nullptr};
  std::atomic<int> standby_applied{0};
  std::atomic<bool> importing{false};
  absl::Mutex log_mu;
  std::vector<std::string> log;
  auto make = [&](ReplicaRole role, std::atomic<ShardReplica*>* to,
                  const char* who) {
    ReplicaShard shard;
    shard.apply = [&](ForwardKind, const std::string&) {
      ++standby_applied;
      return absl::OkStatus();
    };
    shard.export_state = []() -> absl::StatusOr<JoinState> {
      return JoinState();
    };
    shard.import_state = [&](const JoinState&) {
      // A big snapshot: several leases, dozens of heartbeats.
      importing = true;
      absl::SleepFor(3 * lease);
      importing = false;
      return absl::OkStatus();
    };
    ReplicaOptions o;
    o.start_role = role;
    o.lease = lease;
    o.log = [&, who](const std::string& m) {
      absl::MutexLock l(&log_mu);
      log.push_back(absl::StrCat(who, ": ", m));
    };
    return *ShardReplica::Create(std::move(o),
                                 std::make_unique<LoopbackPeer>(to),
                                 std::move(shard));
  };
  auto p = make(ReplicaRole::kPrimary, &standby, "primary");
  auto s = make(ReplicaRole::kStandby, &primary, "standby");
  primary = p.get();
  standby = s.get();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!importing && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(importing.load());
  // A change during the import: refused (not acknowledged); applied on the
  // primary unless it fenced itself already, and then forwarded once the
  // standby holds the state.
  std::atomic<int> ran{0};
  EXPECT_TRUE(absl::IsUnavailable(Change(p.get(), &ran)));
  const int during = ran.load();
  while (!s->Hello().attached && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(s->Hello().attached);
  // Three leases after the join: still one primary with its standby.
  absl::SleepFor(3 * lease);
  EXPECT_EQ(s->role(), ReplicaRole::kStandby);
  EXPECT_EQ(p->role(), ReplicaRole::kPrimary);
  EXPECT_TRUE(p->Hello().has_standby);
  EXPECT_EQ(s->epoch(), p->epoch());
  EXPECT_EQ(standby_applied.load(), during);
  EXPECT_TRUE(Change(p.get(), &ran).ok());
  EXPECT_EQ(standby_applied.load(), during + 1);
  primary = nullptr;
  standby = nullptr;
  s->Stop();
  p->Stop();
  absl::MutexLock l(&log_mu);
  for (const std::string& line : log) {
    EXPECT_EQ(line.find("without a standby"), std::string::npos) << line;
    EXPECT_EQ(line.find("promoted"), std::string::npos) << line;
  }
}

TEST(StandbyShardTest, PeerCheckpointDir) {
  EXPECT_EQ(PeerCheckpointDir("/ckpt/shard3", 3), "/ckpt/standby3");
  EXPECT_EQ(PeerCheckpointDir("/ckpt/standby3/", 3), "/ckpt/shard3");
  EXPECT_EQ(PeerCheckpointDir("shard0", 0), "standby0");
  EXPECT_EQ(PeerCheckpointDir("/ckpt/shard3", 4), "");
  EXPECT_EQ(PeerCheckpointDir("/ckpt/mine", 0), "");
}

// After a failover the promoted standby's folder holds the newest
// snapshot: a primary starting alone restores from there.
TEST(StandbyShardTest, NewerCheckpointDirPicksTheNewerSnapshot) {
  const std::string root = TestTmpPath("standby_newer");
  std::filesystem::remove_all(root);
  const std::string own = root + "/shard0", peer = root + "/standby0";
  store_test::Fixture f = store_test::MakeFixture(1);
  ParameterStoreOptions o;
  o.optimizer.name = "adagrad";
  o.optimizer.learning_rate = 0.1f;
  o.mode = TrainMode::kAsync;
  auto store = *ParameterStore::Create(o);
  ASSERT_TRUE(store->Declare(f.layout, store_test::ChunksOf(f, 0, f.flat)).ok());
  EXPECT_EQ(NewerCheckpointDir(own, peer, 0, 1, nullptr), own);  // None.
  const std::vector<float> g(f.flat.size(), 0.5f);
  auto save_to = [&](const std::string& dir) {
    absl::StatusOr<ShardSnapshot> s = store->Save();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(WriteShardSnapshot(dir, *s, {}).ok());
  };
  ASSERT_TRUE(store->Push(PushId{0, 1, 0, 1, 1}, store_test::ChunksOf(f, 0, g)).ok());
  save_to(own);
  EXPECT_EQ(NewerCheckpointDir(own, peer, 0, 1, nullptr), own);
  ASSERT_TRUE(store->Push(PushId{0, 2, 0, 1, 1}, store_test::ChunksOf(f, 0, g)).ok());
  save_to(peer);
  EXPECT_EQ(NewerCheckpointDir(own, peer, 0, 1, nullptr), peer);
  EXPECT_EQ(NewerCheckpointDir(own, "", 0, 1, nullptr), own);
  ASSERT_TRUE(store->Push(PushId{0, 3, 0, 1, 1}, store_test::ChunksOf(f, 0, g)).ok());
  save_to(own);
  EXPECT_EQ(NewerCheckpointDir(own, peer, 0, 1, nullptr), own);
}

}  // namespace
}  // namespace downpour
