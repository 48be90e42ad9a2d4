#include "rpc/credentials.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "rpc/auth_token.h"

namespace downpour {
namespace {

TEST(CredentialsTest, InsecureByDefault) {
  TransportSecurityOptions o;
  EXPECT_EQ(o.mode, TransportSecurityOptions::Mode::kInsecure);
  auto server = BuildServerCredentials(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(*server, nullptr);
  auto channel = BuildChannelCredentials(o);
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST(CredentialsTest, UnknownModeIsRefused) {
  TransportSecurityOptions o;
  o.mode = static_cast<TransportSecurityOptions::Mode>(42);
  EXPECT_EQ(BuildServerCredentials(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildChannelCredentials(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CredentialsTest, OpenPlaintextIsRefusedUnlessAllowed) {
  TransportSecurityOptions o;
  EXPECT_TRUE(CheckListenAddressIsSafe("127.0.0.1:0", o).ok());
  EXPECT_TRUE(CheckListenAddressIsSafe("[::1]:5000", o).ok());
  EXPECT_TRUE(CheckListenAddressIsSafe("localhost:5000", o).ok());
  absl::Status s = CheckListenAddressIsSafe("0.0.0.0:5000", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--tls_cert"), std::string::npos);
  EXPECT_EQ(CheckTargetIsSafe("198.18.0.5:5000", false, false).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckTargetIsSafe("198.18.0.5:5000", true, false).ok());
  o.allow_insecure = true;
  EXPECT_TRUE(CheckListenAddressIsSafe("0.0.0.0:5000", o).ok());
}

TEST(CredentialsTest, TlsOffLoopbackNeedsClientCertificatesOrAToken) {
  TransportSecurityOptions o;
  o.mode = TransportSecurityOptions::Mode::kTls;
  o.tls_cert_file = "server.pem";
  o.tls_key_file = "server.key";
  // Anonymous TLS: anyone may connect.
  absl::Status s = CheckListenAddressIsSafe("0.0.0.0:5000", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--tls_ca"), std::string::npos) << s;
  EXPECT_TRUE(CheckListenAddressIsSafe("127.0.0.1:5000", o).ok());
  o.tls_ca_file = "ca.pem";
  EXPECT_TRUE(CheckListenAddressIsSafe("0.0.0.0:5000", o).ok());
  o.tls_ca_file.clear();
  o.auth_token_file = "token";
  EXPECT_TRUE(CheckListenAddressIsSafe("0.0.0.0:5000", o).ok());
  o.auth_token_file.clear();
  o.allow_insecure = true;
  EXPECT_TRUE(CheckListenAddressIsSafe("0.0.0.0:5000", o).ok());
}

TEST(CredentialsTest, LoopbackIsWhatTheAddressIsNotHowItReads) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("127.9.9.9"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:5000"));
  EXPECT_TRUE(IsLoopbackAddress("ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:5000"));
  EXPECT_TRUE(IsLoopbackAddress("dns:///localhost:5000"));
  for (const char* open : {"0.0.0.0:1", "[::]:1", "0:1", "10.1.2.3:1",
                           "198.18.0.2:5000", "localhost.example.invalid:5000",
                           "[::ffff:10.0.0.1]:1", "127.0.0.1.example.invalid:1",
                           ":1", ""}) {
    EXPECT_FALSE(IsLoopbackAddress(open)) << open;
  }
}

TEST(CredentialsTest, TokenCheckedAndRefusalsCounted) {
  TokenAuthenticator auth("s3cret");
  EXPECT_TRUE(auth.CheckHeader("Bearer s3cret").ok());
  EXPECT_EQ(auth.CheckHeader("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.CheckHeader("Bearer s3cre").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.CheckHeader("s3cret").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.refused_missing(), 2);
  EXPECT_EQ(auth.refused_wrong(), 1);
}

TEST(CredentialsTest, TokenFileErrorsNameTheFile) {
  auto r = ReadTokenFile("/nonexistent/token");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/token"), std::string::npos);
}

TEST(CredentialsTest, TokenFileOthersMayReadIsRefusedUnlessAllowed) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir == nullptr ? "/tmp" : dir) +
                           "/token_mode_test";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("s3cret\n", f);
  std::fclose(f);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto r = ReadTokenFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("0644"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("chmod 600"), std::string::npos);
  r = ReadTokenFile(path, /*allow_readable=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "s3cret");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  r = ReadTokenFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  // Group access is the owner's choice (Kubernetes' fsGroup: 0440).
  ASSERT_EQ(::chmod(path.c_str(), 0440), 0);
  r = ReadTokenFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace downpour
