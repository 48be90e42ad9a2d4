// Standby shards through real processes: a shard's primary ps_server and its
// standby (--task_type=ps_standby), and in-process gRPC clients pushing
// known integer gradients with plain SGD at lr 1, so the final parameters
// are an exact sum: any push lost or applied twice shows.
//  * The primary is SIGKILLed mid-run: the standby takes over, every
//    acknowledged push is in the final values exactly once, and the shard's
//    pushes_applied counts them. The killed process, started again, rejoins
//    as the standby (catching up from the new primary) and takes over in
//    turn when the new primary is killed. The time from the kill to the
//    first push acknowledged after it is printed ("failover: N ms").
//  * The standby is SIGKILLed mid-run: the primary carries on alone and says
//    so.
//  * With TLS and per-task certificates (--require_task_certificates), a
//    standby started before its primary joins it within seconds of the
//    primary listening (its channel's failed attempts do not keep it out).
//    Then strangers call the replication service of both: no token or a
//    wrong one is UNAUTHENTICATED, a worker's or the job-wide certificate
//    with the token is PERMISSION_DENIED (Join would hand out the shard's
//    state, Forward and Heartbeat would change it), and the pair goes on
//    replicating: the standby still applies what workers push.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/test_files.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/replication.grpc.pb.h"
#include "rpc/credentials.h"
#include "tests/standby_cluster.h"
#include "tests/test_cluster.h"
#include "worker/grpc_ps_client.h"

namespace downpour {
namespace {

constexpr int kClients = 3;
constexpr int kPushes = 120;

// The grpc.health.v1 status of the server at `address`.
grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::string& address) {
  auto ch = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = grpc::health::v1::Health::NewStub(ch)->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

const std::vector<std::string>& ServerFlags() {
  static const auto* flags = new std::vector<std::string>{
      "--mode=async", "--optimizer=sgd", "--lr_schedule=none", "--lr=1",
      "--standby_lease_ms=1000"};
  return *flags;
}

ModelLayout Layout() {
  ModelLayout layout;
  layout.tensors = {{"w", {64, 65}}, {"b", {7}}};
  layout.num_shards = 1;
  layout.max_chunk_bytes = 4 << 10;
  return layout;
}

// Clients 0..kClients-1 push kPushes each, paced, on their own threads;
// acked counts the acknowledged pushes and last_ack the time of the latest.
// With HoldLastPush, each client waits before its last push until
// ReleaseLastPush, so that a kill made meanwhile lands before the job ends
// however slow the machine.
class Pushers {
 public:
  explicit Pushers(const StandbyJob& job) {
    const ModelLayout layout = Layout();
    n_ = layout.NumElements();
    for (int c = 0; c < kClients; ++c) {
      GrpcClientOptions co;
      co.hosts = job.ps;
      co.standby_hosts = job.standby;
      co.worker_id = c;
      co.rpc_timeout = absl::Seconds(10);
      co.reconnect_timeout = absl::Seconds(30);
      auto client = NewGrpcParameterClient(co);
      EXPECT_TRUE(client.ok()) << client.status();
      if (!client.ok()) return;
      EXPECT_TRUE((*client)->Declare(layout, std::vector<float>(n_, 0.0f)).ok());
      clients_.push_back(std::move(*client));
    }
  }

  void Start() {
    errors_.resize(clients_.size());
    for (size_t c = 0; c < clients_.size(); ++c) {
      threads_.emplace_back([this, c] { Run(static_cast<int>(c)); });
    }
  }

  void Join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
    for (const absl::Status& e : errors_) EXPECT_TRUE(e.ok()) << e;
  }
  // A test that stopped early (a failed ASSERT) does not leave the clients
  // held or their threads unjoined.
  ~Pushers() {
    ReleaseLastPush();
    for (auto& t : threads_) t.join();
  }

  void HoldLastPush() {
    absl::MutexLock l(&mu_);
    hold_last_ = true;
  }
  void ReleaseLastPush() {
    absl::MutexLock l(&mu_);
    hold_last_ = false;
  }

  int acked() const { return acked_.load(); }
  // The first push acknowledged at or after `t`.
  absl::Time FirstAckAfter(absl::Time t) {
    absl::MutexLock l(&mu_);
    absl::Time best = absl::InfiniteFuture();
    for (absl::Time a : acks_) {
      if (a >= t && a < best) best = a;
    }
    return best;
  }

  // The final values are the exact sum of every push, once.
  void CheckExact() {
    std::vector<float> params(n_);
    std::vector<int64_t> versions;
    ASSERT_TRUE(clients_[0]->Pull(absl::MakeSpan(params), &versions).ok());
    const double tri = kPushes * (kPushes + 1) / 2.0;
    for (int64_t i = 0; i < n_; ++i) {
      double expected = 0;
      for (int c = 0; c < kClients; ++c) {
        expected += (i % 5 == c) ? (c + 1.0) * tri : kPushes;
      }
      ASSERT_EQ(params[i], static_cast<float>(expected)) << "element " << i;
    }
    for (int64_t v : versions) EXPECT_EQ(v, kClients * kPushes);
    auto stats = clients_[1]->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ((*stats)[0].pushes_applied, kClients * kPushes);
  }

 private:
  void Run(int c) {
    std::vector<int64_t> versions;
    std::vector<float> params(n_), grad(n_);
    for (int p = 1; p <= kPushes && errors_[c].ok(); ++p) {
      if (p == kPushes) {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](bool* hold) { return !*hold; }, &hold_last_));
      }
      errors_[c] = clients_[c]->Pull(absl::MakeSpan(params), &versions);
      if (!errors_[c].ok()) break;
      // Integers: float32 sums stay exact.
      for (int64_t i = 0; i < n_; ++i) {
        grad[i] = (i % 5 == c) ? -(c + 1.0f) * p : -1.0f;
      }
      errors_[c] = clients_[c]->Push(p, grad, versions);
      if (errors_[c].ok()) {
        ++acked_;
        absl::MutexLock l(&mu_);
        acks_.push_back(absl::Now());
      }
      absl::SleepFor(absl::Milliseconds(8));
    }
  }

  int64_t n_ = 0;
  std::vector<std::unique_ptr<ParameterClient>> clients_;
  std::vector<std::thread> threads_;
  std::vector<absl::Status> errors_;
  std::atomic<int> acked_{0};
  absl::Mutex mu_;
  std::vector<absl::Time> acks_ ABSL_GUARDED_BY(mu_);
  bool hold_last_ ABSL_GUARDED_BY(mu_) = false;
};

void WaitForAcked(const Pushers& p, int n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (p.acked() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(p.acked(), n);
}

TEST(StandbyTest, PrimaryKilledStandbyTakesOverAndTheOldOneRejoins) {
  const StandbyJob job = StandbyJob::Make(1, kClients);
  auto primary = StartSpecServer(job, "ps", 0, ServerFlags());
  ASSERT_TRUE(primary);
  auto standby = StartSpecServer(job, "ps_standby", 0, ServerFlags());
  ASSERT_TRUE(standby);
  std::vector<std::string> standby_log;
  ASSERT_TRUE(WaitForText(standby.get(), "caught up", absl::Seconds(20),
                          &standby_log))
      << absl::StrJoin(standby_log, "\n");
  Pushers pushers(job);
  ASSERT_FALSE(testing::Test::HasFailure());
  // Declared: the primary serves, the standby (refusing workers) does not.
  EXPECT_EQ(Health(job.ps[0]), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(job.standby[0]),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  pushers.HoldLastPush();  // The second kill below lands before the end.
  pushers.Start();

  // Kill the primary a third of the way in.
  WaitForAcked(pushers, kClients * kPushes / 3);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(primary->Signal(SIGKILL).ok());
  primary->WaitFor(absl::Seconds(5), nullptr);
  EXPECT_TRUE(WaitForText(standby.get(), "promoted to primary (epoch 2)",
                          absl::Seconds(10), &standby_log))
      << absl::StrJoin(standby_log, "\n");
  const int at_kill = pushers.acked();
  WaitForAcked(pushers, at_kill + kClients);
  const absl::Duration failover = pushers.FirstAckAfter(killed) - killed;
  std::printf("failover: %lld ms (kill to the first push acknowledged)\n",
              static_cast<long long>(absl::ToInt64Milliseconds(failover)));
  EXPECT_LT(failover, absl::Seconds(5));
  EXPECT_EQ(Health(job.standby[0]),
            grpc::health::v1::HealthCheckResponse::SERVING);

  // The killed process, started again, rejoins as the standby.
  auto again = StartSpecServer(job, "ps", 0, ServerFlags());
  ASSERT_TRUE(again);
  std::vector<std::string> again_log;
  EXPECT_TRUE(WaitForText(again.get(), "caught up", absl::Seconds(20),
                          &again_log))
      << absl::StrJoin(again_log, "\n");

  // Two thirds in (or later, but before every client's last push), the new
  // primary is killed: the rejoined one takes over and takes the rest.
  WaitForAcked(pushers, 2 * kClients * kPushes / 3);
  ASSERT_TRUE(standby->Signal(SIGKILL).ok());
  standby->WaitFor(absl::Seconds(5), nullptr);
  const int at_second_kill = pushers.acked();
  EXPECT_LT(at_second_kill, kClients * kPushes);
  EXPECT_TRUE(WaitForText(again.get(), "promoted to primary (epoch 3)",
                          absl::Seconds(10), &again_log))
      << absl::StrJoin(again_log, "\n");
  pushers.ReleaseLastPush();
  pushers.Join();
  pushers.CheckExact();
}

TEST(StandbyTest, StandbyKilledPrimaryCarriesOnAlone) {
  const StandbyJob job = StandbyJob::Make(1, kClients);
  auto primary = StartSpecServer(job, "ps", 0, ServerFlags());
  ASSERT_TRUE(primary);
  auto standby = StartSpecServer(job, "ps_standby", 0, ServerFlags());
  ASSERT_TRUE(standby);
  std::vector<std::string> primary_log;
  ASSERT_TRUE(WaitForText(primary.get(), "joined (epoch 1", absl::Seconds(20),
                          &primary_log))
      << absl::StrJoin(primary_log, "\n");
  Pushers pushers(job);
  ASSERT_FALSE(testing::Test::HasFailure());
  pushers.Start();
  WaitForAcked(pushers, kClients * kPushes / 2);
  ASSERT_TRUE(standby->Signal(SIGKILL).ok());
  standby->WaitFor(absl::Seconds(5), nullptr);
  EXPECT_TRUE(WaitForText(primary.get(), "running without a standby",
                          absl::Seconds(10), &primary_log))
      << absl::StrJoin(primary_log, "\n");
  pushers.Join();
  pushers.CheckExact();
}

TEST(StandbyTest, TlsStandbyStartedBeforeItsPrimaryJoins) {
  const std::string certs = TestTmpPath("certs");
  const std::string cmd = absl::StrCat(
      "bash deploy/make_certs.sh --ps=1 --workers=1 ", certs, " >/dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::string> flags = ServerFlags();
  for (const std::string& f :
       {"--tls_cert=" + certs + "/ps-0.pem", "--tls_key=" + certs + "/ps-0.key",
        "--tls_ca=" + certs + "/ca.pem", "--auth_token_file=" + certs + "/token",
        std::string("--require_task_certificates")}) {
    flags.push_back(f);
  }
  const StandbyJob job = StandbyJob::Make(1, 1);
  // The standby first: it says it waits, its channel's attempts refused.
  std::vector<std::string> argv = {"server/ps_server"};
  for (const std::string& f : job.SpecFlags("ps_standby", 0)) argv.push_back(f);
  for (const std::string& f : flags) argv.push_back(f);
  auto standby = StartChild(argv);
  ASSERT_TRUE(standby);
  std::vector<std::string> standby_log;
  ASSERT_TRUE(WaitForText(standby.get(), "waiting for a primary",
                          absl::Seconds(10), &standby_log))
      << absl::StrJoin(standby_log, "\n");
  absl::SleepFor(absl::Seconds(1));
  auto primary = StartSpecServer(job, "ps", 0, flags);
  ASSERT_TRUE(primary);
  std::vector<std::string> primary_log;
  EXPECT_TRUE(WaitForText(primary.get(), "joined (epoch 1", absl::Seconds(5),
                          &primary_log))
      << absl::StrJoin(primary_log, "\n");
  EXPECT_TRUE(WaitForText(standby.get(), "caught up", absl::Seconds(5),
                          &standby_log))
      << absl::StrJoin(standby_log, "\n");

  const std::string wrong_token = TestTmpPath("wrong_token");
  WriteBytes(wrong_token, "not-the-token\n");
  ::chmod(wrong_token.c_str(), 0600);
  // A client presenting `cert` ("ps-0", "worker-0", "client": the job-wide
  // one) and `token` (a file, or none).
  auto channel = [&](const std::string& address, const std::string& cert,
                     const std::string& token) {
    TransportSecurityOptions o;
    o.mode = TransportSecurityOptions::Mode::kTls;
    o.tls_ca_file = certs + "/ca.pem";
    o.tls_cert_file = certs + "/" + cert + ".pem";
    o.tls_key_file = certs + "/" + cert + ".key";
    o.auth_token_file = token;
    absl::StatusOr<ClientSecurity> security = BuildClientSecurity(o);
    EXPECT_TRUE(security.ok()) << security.status();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch =
        CreateChannel(address, *security, grpc::ChannelArguments());
    EXPECT_TRUE(ch.ok()) << ch.status();
    return proto::Replication::NewStub(*ch);
  };
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
  };
  struct Stranger {
    const char* name;
    std::string cert, token;
    grpc::StatusCode want;
  };
  const std::string token = certs + "/token";
  const std::vector<Stranger> strangers = {
      {"the shard's certificate, no token", "ps-0", "",
       grpc::StatusCode::UNAUTHENTICATED},
      {"the shard's certificate, a wrong token", "ps-0", wrong_token,
       grpc::StatusCode::UNAUTHENTICATED},
      {"a worker's certificate", "worker-0", token,
       grpc::StatusCode::PERMISSION_DENIED},
      {"the job-wide certificate", "client", token,
       grpc::StatusCode::PERMISSION_DENIED},
  };
  for (const std::string& address : {job.ps[0], job.standby[0]}) {
    for (const Stranger& k : strangers) {
      auto stub = channel(address, k.cert, k.token);
      const std::string what = absl::StrCat(address, ", ", k.name);
      {
        proto::JoinRequest req;
        req.set_shard_index(0);
        proto::JoinResponse resp;
        grpc::ClientContext ctx;
        deadline(&ctx);
        grpc::Status s = stub->Join(&ctx, req, &resp);
        EXPECT_EQ(s.error_code(), k.want) << what << ": " << s.error_message();
        EXPECT_TRUE(resp.snapshot().empty()) << what;
      }
      {
        proto::ForwardRequest req;
        req.set_epoch(1000);  // An epoch from a "newer primary".
        req.set_request("garbage");
        proto::ForwardResponse resp;
        grpc::ClientContext ctx;
        deadline(&ctx);
        grpc::Status s = stub->Forward(&ctx, req, &resp);
        EXPECT_EQ(s.error_code(), k.want) << what << ": " << s.error_message();
      }
      {
        proto::HeartbeatRequest req;
        req.set_epoch(1000);
        proto::HeartbeatResponse resp;
        grpc::ClientContext ctx;
        deadline(&ctx);
        grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
        EXPECT_EQ(s.error_code(), k.want) << what << ": " << s.error_message();
      }
    }
  }
  // The shard's own certificate and token are answered, and nothing
  // moved: still a primary with its standby in step, in epoch 1.
  auto hello = [&](const std::string& address) {
    auto stub = channel(address, "ps-0", token);
    proto::HelloRequest req;
    req.set_shard_index(0);
    proto::HelloResponse resp;
    grpc::ClientContext ctx;
    deadline(&ctx);
    grpc::Status s = stub->Hello(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << address << ": " << s.error_message();
    return resp;
  };
  const proto::HelloResponse p = hello(job.ps[0]);
  EXPECT_EQ(p.role(), proto::ROLE_PRIMARY);
  EXPECT_TRUE(p.has_standby());
  EXPECT_EQ(p.epoch(), 1u);
  const proto::HelloResponse s = hello(job.standby[0]);
  EXPECT_EQ(s.role(), proto::ROLE_STANDBY);
  EXPECT_TRUE(s.attached());
  EXPECT_EQ(s.epoch(), 1u);
  EXPECT_FALSE(WaitForText(primary.get(), "without a standby",
                           absl::Seconds(1), &primary_log))
      << absl::StrJoin(primary_log, "\n");
}

// A standby whose primary never comes stops on SIGTERM at once, saying what
// it was waiting for.
TEST(StandbyTest, StandbyWaitingForItsPrimaryStopsOnSigterm) {
  const StandbyJob job = StandbyJob::Make(1, 1);
  std::vector<std::string> argv = {"server/ps_server"};
  for (const std::string& f : job.SpecFlags("ps_standby", 0)) argv.push_back(f);
  for (const std::string& f : ServerFlags()) argv.push_back(f);
  auto standby = StartChild(argv);
  ASSERT_TRUE(standby);
  std::vector<std::string> log;
  ASSERT_TRUE(WaitForText(standby.get(), "waiting for a primary",
                          absl::Seconds(10), &log))
      << absl::StrJoin(log, "\n");
  ASSERT_TRUE(standby->Signal(SIGTERM).ok());
  ASSERT_TRUE(standby->WaitFor(absl::Seconds(2), &log))
      << "still waiting 2 s after SIGTERM:\n" << absl::StrJoin(log, "\n");
  EXPECT_TRUE(standby->exit_status().success())
      << standby->exit_status().ToString() << "\n" << absl::StrJoin(log, "\n");
  EXPECT_NE(absl::StrJoin(log, "\n").find(
                "stopped by a signal while waiting for a primary"),
            std::string::npos)
      << absl::StrJoin(log, "\n");
}

}  // namespace
}  // namespace downpour
