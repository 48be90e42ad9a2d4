// Mutual TLS, bearer tokens, the open-bind refusal and the health states,
// against real ps_server processes (tests/test_cluster.h) and real gRPC
// clients: each wrong client is refused and changes nothing, the right one
// is served.
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
      const std::string cmd = absl::StrCat("bash deploy/make_certs.sh ", d, " >/dev/null");
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
  o.argv = {"server/ps_server", "--bind=0.0.0.0", "--port=0"};
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
