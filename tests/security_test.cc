// Mutual TLS, bearer tokens, the open-bind refusal and the health states,
// against real ps_server processes (tests/test_cluster.h) and real gRPC
// clients: each wrong client is refused and changes nothing, the right one
// is served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "deploy/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/job_control.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "tests/test_cluster.h"

namespace downpour {
namespace {

using grpc::health::v1::HealthCheckResponse;

// The job's certificates and token, and a second CA's, made once.
struct Certs {
  std::string dir, other;
};
const Certs& JobCerts() {
  static const Certs* certs = [] {
    auto* c = new Certs{TestTmpPath("job"), TestTmpPath("other")};
    for (const std::string& d : {c->dir, c->other}) {
      // One certificate per task too: ps-0, worker-0, worker-1.
      const std::string cmd = absl::StrCat(
          "bash deploy/make_certs.sh --ps=1 --workers=2 ", d, " >/dev/null");
      if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << cmd << " failed";
    }
    return c;
  }();
  return *certs;
}

std::vector<std::string> ServerFlags(const Certs& c) {
  return {"--tls_cert=" + c.dir + "/server.pem", "--tls_key=" + c.dir + "/server.key",
          "--tls_ca=" + c.dir + "/ca.pem", "--auth_token_file=" + c.dir + "/token"};
}

// A client's options: which files it presents.
TransportSecurityOptions Client(const std::string& ca, const std::string& cert_dir,
                                const std::string& token_file) {
  TransportSecurityOptions o;
  if (!ca.empty()) {
    o.mode = TransportSecurityOptions::Mode::kTls;
    o.tls_ca_file = ca;
  }
  if (!cert_dir.empty()) {
    o.tls_cert_file = cert_dir + "/client.pem";
    o.tls_key_file = cert_dir + "/client.key";
  }
  o.auth_token_file = token_file;
  return o;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& host,
                                       const TransportSecurityOptions& o) {
  auto security = BuildClientSecurity(o);
  EXPECT_TRUE(security.ok()) << security.status();
  auto ch = CreateChannel(host, *security, grpc::ChannelArguments());
  EXPECT_TRUE(ch.ok()) << ch.status();
  return *ch;
}

// A one-tensor declaration (4 floats) for a single shard.
grpc::Status Declare(const std::shared_ptr<grpc::Channel>& ch) {
  proto::DeclareModelRequest req;
  proto::TensorSpec* t = req.mutable_layout()->add_tensors();
  t->set_name("w");
  t->add_shape(4);
  req.mutable_layout()->set_max_chunk_bytes(1 << 20);
  req.mutable_layout()->set_num_shards(1);
  proto::ChunkValues* c = req.add_initial();
  c->set_chunk_id(0);
  c->set_data(std::string(16, '\0'));
  proto::DeclareModelResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return proto::ParameterServer::NewStub(ch)->DeclareModel(&ctx, req, &resp);
}

HealthCheckResponse::ServingStatus Health(const std::shared_ptr<grpc::Channel>& ch) {
  grpc::health::v1::HealthCheckRequest req;
  HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = grpc::health::v1::Health::NewStub(ch)->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

TEST(SecurityTest, WrongClientsRefusedRightOneServedAndHealthFollows) {
  const Certs& c = JobCerts();
  auto cluster = TestCluster::Start({.num_shards = 1, .server_flags = ServerFlags(c)});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string host = (*cluster)->hosts()[0];
  const std::string token = c.dir + "/token";
  const std::string wrong_token = TestTmpPath("wrong_token");
  WriteBytes(wrong_token, "not-the-token\n");
  ::chmod(wrong_token.c_str(), 0600);  // A readable token file is refused.

  struct Case {
    const char* name;
    TransportSecurityOptions o;
    grpc::StatusCode want;
  };
  const std::vector<Case> cases = {
      {"plaintext", Client("", "", token), grpc::StatusCode::UNAVAILABLE},
      {"tls without client certificate", Client(c.dir + "/ca.pem", "", token),
       grpc::StatusCode::UNAVAILABLE},
      {"client certificate of another CA", Client(c.dir + "/ca.pem", c.other, token),
       grpc::StatusCode::UNAVAILABLE},
      {"no token", Client(c.dir + "/ca.pem", c.dir, ""),
       grpc::StatusCode::UNAUTHENTICATED},
      {"wrong token", Client(c.dir + "/ca.pem", c.dir, wrong_token),
       grpc::StatusCode::UNAUTHENTICATED},
  };
  const auto right = Channel(host, Client(c.dir + "/ca.pem", c.dir, token));
  EXPECT_EQ(Health(right), HealthCheckResponse::NOT_SERVING);
  for (const Case& k : cases) {
    grpc::Status s = Declare(Channel(host, k.o));
    EXPECT_EQ(s.error_code(), k.want) << k.name << ": " << s.error_message();
    if (k.want == grpc::StatusCode::UNAUTHENTICATED) {
      EXPECT_NE(s.error_message().find("token"), std::string::npos) << s.error_message();
    }
  }
  // Nothing was declared by the refused clients: still NOT_SERVING, and
  // GetStats (the right client) says uninitialized.
  EXPECT_EQ(Health(right), HealthCheckResponse::NOT_SERVING);
  {
    proto::StatsResponse stats;
    grpc::ClientContext ctx;
    ASSERT_TRUE(proto::ParameterServer::NewStub(right)
                    ->GetStats(&ctx, proto::StatsRequest(), &stats).ok());
    EXPECT_FALSE(stats.initialized());
  }
  grpc::Status s = Declare(right);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Health(right), HealthCheckResponse::SERVING);
  EXPECT_TRUE((*cluster)->AllRunning());
}

TEST(SecurityTest, OpenBindWithoutTlsIsRefusedUnlessAllowed) {
  SubprocessOptions o;
  o.argv = {"server/ps_server", "--bind=0.0.0.0", "--port=0", "--num_workers=1"};
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> lines;
  ASSERT_TRUE((*p)->WaitFor(absl::Seconds(20), &lines));
  EXPECT_EQ((*p)->exit_status().exit_code, 2);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("refusing to serve 0.0.0.0"), std::string::npos) << all;
  EXPECT_NE(all.find("--allow_insecure"), std::string::npos) << all;

  o.argv.push_back("--allow_insecure");
  auto q = Subprocess::Start(o);
  ASSERT_TRUE(q.ok()) << q.status();
  auto line = (*q)->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Seconds(20), &lines);
  EXPECT_TRUE(line.ok()) << line.status();
}

TEST(SecurityTest, AnonymousTlsOffLoopbackIsRefused) {
  // TLS with no --tls_ca and no token served any client with no
  // certificate.
  const Certs& c = JobCerts();
  SubprocessOptions o;
  o.argv = {"server/ps_server", "--bind=0.0.0.0", "--port=0", "--num_workers=1",
            "--tls_cert=" + c.dir + "/server.pem",
            "--tls_key=" + c.dir + "/server.key"};
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> lines;
  ASSERT_TRUE((*p)->WaitFor(absl::Seconds(20), &lines));
  EXPECT_EQ((*p)->exit_status().exit_code, 2);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("no client check"), std::string::npos) << all;
  // With a token it serves.
  o.argv.push_back("--auth_token_file=" + c.dir + "/token");
  auto q = Subprocess::Start(o);
  ASSERT_TRUE(q.ok()) << q.status();
  auto line = (*q)->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Seconds(20), &lines);
  EXPECT_TRUE(line.ok()) << line.status();
}

// A push of one gradient (4 floats of 1) for `worker` with `incarnation`,
// over a channel presenting `cert` ("worker-1", "client", ...).
grpc::Status PushAs(const std::string& host, const std::string& cert,
                    int worker, int64_t seq, uint64_t incarnation) {
  const Certs& c = JobCerts();
  TransportSecurityOptions o = Client(c.dir + "/ca.pem", "", c.dir + "/token");
  o.tls_cert_file = c.dir + "/" + cert + ".pem";
  o.tls_key_file = c.dir + "/" + cert + ".key";
  proto::PushRequest req;
  req.set_worker_id(worker);
  req.set_seq(seq);
  req.set_incarnation(incarnation);
  proto::ChunkGradient* g = req.add_gradients();
  g->set_chunk_id(0);
  const float ones[4] = {1, 1, 1, 1};
  g->set_data(std::string(reinterpret_cast<const char*>(ones), 16));
  proto::PushResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return proto::ParameterServer::NewStub(Channel(host, o))->Push(&ctx, req, &resp);
}

int64_t PushesApplied(const std::string& host) {
  const Certs& c = JobCerts();
  proto::StatsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status s =
      proto::ParameterServer::NewStub(
          Channel(host, Client(c.dir + "/ca.pem", c.dir, c.dir + "/token")))
          ->GetStats(&ctx, proto::StatsRequest(), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.pushes_applied();
}

TEST(SecurityTest, OneWorkerCannotSpeakForAnother) {
  // A push claiming worker 0 with a new incarnation made the real worker 0
  // fail (replaced incarnation); one with seq 2^62 made the server take its
  // later pushes as duplicates. Now each worker certificate pushes only as
  // its own index.
  const Certs& c = JobCerts();
  std::vector<std::string> flags = {
      "--tls_cert=" + c.dir + "/ps-0.pem", "--tls_key=" + c.dir + "/ps-0.key",
      "--tls_ca=" + c.dir + "/ca.pem", "--auth_token_file=" + c.dir + "/token"};
  auto cluster = TestCluster::Start({.num_shards = 1, .server_flags = flags});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string host = (*cluster)->hosts()[0];
  ASSERT_TRUE(Declare(Channel(host, Client(c.dir + "/ca.pem", c.dir,
                                           c.dir + "/token")))
                  .ok());
  ASSERT_TRUE(PushAs(host, "worker-0", 0, 1, 100).ok());
  // worker-1 as worker 0: with a new incarnation, with a huge seq.
  grpc::Status s = PushAs(host, "worker-1", 0, 1, 999);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("worker-0"), std::string::npos) << s.error_message();
  EXPECT_EQ(PushAs(host, "worker-1", 0, int64_t{1} << 62, 100).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(PushAs(host, "ps-0", 0, 2, 100).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Worker 0 itself cannot jump its seq out of bounds either.
  EXPECT_EQ(PushAs(host, "worker-0", 0, int64_t{1} << 62, 100).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // The real worker 0 goes on: its next push applies.
  ASSERT_TRUE(PushAs(host, "worker-0", 0, 2, 100).ok());
  ASSERT_TRUE(PushAs(host, "worker-1", 1, 1, 555).ok());
  // A job-wide certificate is taken (no --require_task_certificates).
  ASSERT_TRUE(PushAs(host, "client", 1, 2, 555).ok());
  EXPECT_EQ(PushesApplied(host), 4);
  EXPECT_TRUE((*cluster)->AllRunning());
}

// A free loopback port (bound, then released).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(SecurityTest, OnlyAWorkerReportsItselfAndOnlyTheChiefEndsTheJob) {
  const Certs& c = JobCerts();
  std::vector<std::string> flags = {
      absl::StrCat("--ps_hosts=127.0.0.1:", FreePort()),
      "--worker_hosts=127.0.0.1:1,127.0.0.1:2", "--task_type=ps",
      "--task_index=0", "--tls_cert=" + c.dir + "/ps-0.pem",
      "--tls_key=" + c.dir + "/ps-0.key", "--tls_ca=" + c.dir + "/ca.pem",
      "--auth_token_file=" + c.dir + "/token"};
  auto cluster = TestCluster::Start({.num_shards = 1, .server_flags = flags});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string host = (*cluster)->hosts()[0];
  auto stub = [&](const std::string& cert) {
    TransportSecurityOptions o = Client(c.dir + "/ca.pem", "", c.dir + "/token");
    o.tls_cert_file = c.dir + "/" + cert + ".pem";
    o.tls_key_file = c.dir + "/" + cert + ".key";
    return proto::JobControl::NewStub(Channel(host, o));
  };
  auto done = [&](const std::string& cert, int worker) {
    proto::WorkerDoneRequest req;
    req.set_worker_id(worker);
    proto::WorkerDoneResponse resp;
    grpc::ClientContext ctx;
    return stub(cert)->WorkerDone(&ctx, req, &resp).error_code();
  };
  auto end = [&](const std::string& cert, int worker) {
    proto::EndJobRequest req;
    req.set_worker_id(worker);
    proto::EndJobResponse resp;
    grpc::ClientContext ctx;
    return stub(cert)->EndJob(&ctx, req, &resp).error_code();
  };
  EXPECT_EQ(done("worker-1", 0), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(done("worker-1", 1), grpc::StatusCode::OK);
  EXPECT_EQ(end("worker-1", 1), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(end("worker-1", 0), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(end("ps-0", 0), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE((*cluster)->AllRunning());
  // The chief ends it: the server stops.
  EXPECT_EQ(end("worker-0", 0), grpc::StatusCode::OK);
  std::vector<std::string> lines;
  EXPECT_TRUE((*cluster)->server(0)->WaitFor(absl::Seconds(20), &lines));
}

TEST(SecurityTest, RequireTaskCertificatesRefusesJobWideOnes) {
  const Certs& c = JobCerts();
  std::vector<std::string> flags = ServerFlags(c);
  flags.push_back("--require_task_certificates");
  auto cluster = TestCluster::Start({.num_shards = 1, .server_flags = flags});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string host = (*cluster)->hosts()[0];
  ASSERT_TRUE(Declare(Channel(host, Client(c.dir + "/ca.pem", c.dir,
                                           c.dir + "/token")))
                  .ok());
  EXPECT_EQ(PushAs(host, "client", 0, 1, 7).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(PushAs(host, "worker-0", 0, 1, 7).ok());
  EXPECT_EQ(PushesApplied(host), 1);
}

TEST(SecurityTest, MissingOrMismatchedFilesNamed) {
  const Certs& c = JobCerts();
  TransportSecurityOptions o = Client(c.dir + "/ca.pem", c.dir, "");
  o.tls_key_file = c.other + "/client.key";  // Not the certificate's key.
  auto r = BuildServerCredentials(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not match"), std::string::npos);
  o.tls_ca_file = c.dir + "/missing.pem";
  o.tls_key_file = c.dir + "/client.key";
  r = BuildServerCredentials(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.pem"), std::string::npos);
}

// A ps_worker process against the secure cluster with the given token file
// (and the job's certificates): its exit status and output.
ExitStatus RunWorker(const TestCluster& cluster, const std::string& token,
                     std::vector<std::string>* lines) {
  const Certs& c = JobCerts();
  SubprocessOptions o;
  o.argv = {"worker/ps_worker", "--ps_hosts=" + cluster.hosts()[0],
            "--tls_cert=" + c.dir + "/client.pem", "--tls_key=" + c.dir + "/client.key",
            "--tls_ca=" + c.dir + "/ca.pem", "--auth_token_file=" + token,
            "--max_train_examples=640", "--max_steps=5", "--log_every=5",
            "--connect_timeout_s=20"};
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return ExitStatus();
  EXPECT_TRUE((*p)->WaitFor(absl::Seconds(60), lines));
  return (*p)->exit_status();
}

TEST(SecurityTest, WorkerWithWrongTokenFailsSayingSoAndRightOneTrains) {
  const Certs& c = JobCerts();
  auto cluster = TestCluster::Start({.num_shards = 1, .server_flags = ServerFlags(c)});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string wrong_token = TestTmpPath("worker_wrong_token");
  WriteBytes(wrong_token, "not-the-token\n");
  ::chmod(wrong_token.c_str(), 0600);  // A readable token file is refused.
  std::vector<std::string> lines;
  ExitStatus e = RunWorker(**cluster, wrong_token, &lines);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_FALSE(e.success()) << all;
  EXPECT_NE(all.find("UNAUTHENTICATED"), std::string::npos) << all;
  EXPECT_NE(all.find("token"), std::string::npos) << all;
  EXPECT_EQ(all.find("DONE"), std::string::npos) << all;

  lines.clear();
  e = RunWorker(**cluster, c.dir + "/token", &lines);
  all.clear();
  for (const auto& l : lines) all += l + "\n";
  EXPECT_TRUE(e.success()) << e.ToString() << "\n" << all;
  EXPECT_NE(all.find("DONE {"), std::string::npos) << all;
  EXPECT_TRUE((*cluster)->AllRunning());
}

// grpc.health.v1.Health/Watch over a real server: NOT_SERVING before the
// declaration, SERVING after it, NOT_SERVING when SIGTERM starts draining.
TEST(SecurityTest, HealthWatchSeesServingThenDraining) {
  auto cluster = TestCluster::Start({.num_shards = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const auto ch = Channel((*cluster)->hosts()[0], TransportSecurityOptions());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = grpc::health::v1::Health::NewStub(ch)->Watch(
      &ctx, grpc::health::v1::HealthCheckRequest());
  HealthCheckResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Declare(ch).ok());
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE((*cluster)->server(0)->Signal(SIGTERM).ok());
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
}

}  // namespace
}  // namespace downpour
