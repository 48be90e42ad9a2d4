// Who may call Sandblaster's services, in one process with the job's real
// certificates (deploy/make_certs.sh) and --require_task_certificates: a
// shard's SandblasterShard takes programs and the coordinator's address
// only from the chief (worker-0) and pushes only from the worker they name;
// the chief's coordinator checks the token from the headers and takes a
// request for worker k only from worker-k; it will not listen in plaintext
// off loopback.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/sandblaster.grpc.pb.h"
#include "rpc/auth_token.h"
#include "rpc/credentials.h"
#include "rpc/server_auth.h"
#include "server/sandblaster_service.h"
#include "worker/sandblaster_portions.h"
#include "worker/sandblaster_rpc.h"

namespace downpour {
namespace {

const std::string& CertDir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    auto* d = new std::string(absl::StrCat(tmp ? tmp : "/tmp", "/sb_certs"));
    const std::string cmd = absl::StrCat(
        "bash deploy/make_certs.sh --ps=1 --workers=3 ", *d, " >/dev/null");
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << cmd << " failed";
    return d;
  }();
  return *dir;
}

TransportSecurityOptions ServerSecurity() {
  TransportSecurityOptions o;
  o.mode = TransportSecurityOptions::Mode::kTls;
  o.tls_cert_file = CertDir() + "/server.pem";
  o.tls_key_file = CertDir() + "/server.key";
  o.tls_ca_file = CertDir() + "/ca.pem";
  o.auth_token_file = CertDir() + "/token";
  o.require_task_certificates = true;
  return o;
}

// A client presenting certificate `cert` ("worker-2", "client": the
// job-wide one) and the token (unless `token` is false).
TransportSecurityOptions As(const std::string& cert, bool token = true) {
  TransportSecurityOptions o;
  o.mode = TransportSecurityOptions::Mode::kTls;
  o.tls_ca_file = CertDir() + "/ca.pem";
  o.tls_cert_file = CertDir() + "/" + cert + ".pem";
  o.tls_key_file = CertDir() + "/" + cert + ".key";
  if (token) o.auth_token_file = CertDir() + "/token";
  return o;
}

std::unique_ptr<proto::SandblasterShard::Stub> Shard(
    const std::string& host, const TransportSecurityOptions& o) {
  absl::StatusOr<ClientSecurity> security = BuildClientSecurity(o);
  EXPECT_TRUE(security.ok()) << security.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ch =
      CreateChannel(host, *security, grpc::ChannelArguments());
  EXPECT_TRUE(ch.ok()) << ch.status();
  return proto::SandblasterShard::NewStub(*ch);
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

grpc::StatusCode SetCoordinator(const std::string& host,
                                const std::string& cert,
                                const std::string& address) {
  proto::CoordinatorAddress req;
  req.set_address(address);
  proto::SetCoordinatorResponse resp;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  return Shard(host, As(cert))->SetCoordinator(&ctx, req, &resp).error_code();
}

grpc::StatusCode RunAs(const std::string& host, const std::string& cert) {
  proto::VectorProgram req;
  req.add_ops()->set_kind(static_cast<int>(VectorOp::Kind::kPublish));
  proto::VectorResult resp;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  return Shard(host, As(cert))->Run(&ctx, req, &resp).error_code();
}

grpc::StatusCode AccumulateAs(const std::string& host, const std::string& cert,
                              int worker) {
  proto::AccumulateRequest req;
  req.set_eval(1);
  req.set_worker_id(worker);
  proto::AccumulateResponse resp;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  return Shard(host, As(cert))->Accumulate(&ctx, req, &resp).error_code();
}

TEST(SandblasterAuthTest, ShardTakesProgramsFromTheChiefAndPushesFromTheirWorker) {
  const TransportSecurityOptions security = ServerSecurity();
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::Create(security);
  ASSERT_TRUE(auth.ok()) << auth.status();
  std::shared_ptr<const TokenAuthenticator> shared(std::move(*auth));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      BuildServerCredentials(security);
  ASSERT_TRUE(creds.ok()) << creds.status();
  // No store: a call let through is answered UNAVAILABLE ("not serving").
  std::unique_ptr<grpc::Service> service = NewSandblasterShardService(
      [] { return nullptr; }, shared.get(), {3, true});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           WithTokenCheck(*creds, security, shared), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string host = absl::StrCat("127.0.0.1:", port);

  // Only the chief registers the coordinator.
  EXPECT_EQ(SetCoordinator(host, "worker-2", "evil:1"),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(SetCoordinator(host, "client", "evil:1"),  // job-wide, strict
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(SetCoordinator(host, "ps-0", "evil:1"),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(SetCoordinator(host, "worker-0", "chief:7"), grpc::StatusCode::OK);
  proto::CoordinatorAddress found;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  ASSERT_TRUE(Shard(host, As("worker-2"))
                  ->GetCoordinator(&ctx, proto::GetCoordinatorRequest(), &found)
                  .ok());
  EXPECT_EQ(found.address(), "chief:7");
  // Only the chief runs programs.
  EXPECT_EQ(RunAs(host, "worker-2"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RunAs(host, "client"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RunAs(host, "worker-0"), grpc::StatusCode::UNAVAILABLE);
  // A worker pushes only as itself.
  EXPECT_EQ(AccumulateAs(host, "worker-2", 0),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(AccumulateAs(host, "client", 2),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(AccumulateAs(host, "worker-2", 2), grpc::StatusCode::UNAVAILABLE);
  // No token: refused from the headers.
  proto::AccumulateRequest req;
  req.set_worker_id(2);
  proto::AccumulateResponse resp;
  grpc::ClientContext no_token;
  Deadline(&no_token);
  EXPECT_EQ(Shard(host, As("worker-2", false))
                ->Accumulate(&no_token, req, &resp)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown();
}

TEST(SandblasterAuthTest, CoordinatorTakesAWorkersRequestsOnlyFromIt) {
  PortionTable table(PortionTableOptions{3});
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(&table, "127.0.0.1:0", ServerSecurity());
  ASSERT_TRUE(server.ok()) << server.status();
  const auto ask = [&](const std::string& cert, int worker,
                       bool token = true) {
    absl::StatusOr<std::unique_ptr<WorkSource>> source = RemoteWorkSource(
        (*server)->address(), As(cert, token), absl::Seconds(1));
    EXPECT_TRUE(source.ok()) << source.status();
    WorkReport r;
    r.worker = worker;
    return (*source)->GetWork(r).status().code();
  };
  EXPECT_EQ(ask("worker-2", 2), absl::StatusCode::kOk);
  EXPECT_EQ(ask("worker-2", 0), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ask("client", 1), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ask("worker-2", 2, /*token=*/false),
            absl::StatusCode::kUnauthenticated);
  // Not in plaintext off loopback without --allow_insecure.
  TransportSecurityOptions plaintext;
  EXPECT_EQ(CoordinatorServer::Start(&table, "0.0.0.0:0", plaintext)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace downpour
