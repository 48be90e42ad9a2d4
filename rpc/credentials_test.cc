#include "rpc/credentials.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace downpour
