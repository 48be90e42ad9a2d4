#include "rpc/credentials.h"

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

}  // namespace
}  // namespace downpour
