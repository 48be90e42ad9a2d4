#include "rpc/net_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

TEST(ProbeListenTest, FreeLoopbackPortIsListenable) {
  EXPECT_TRUE(ProbeListen("127.0.0.1:0").ok());
}

TEST(ProbeListenTest, PortInUseNamesAddressAndReason) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string addr = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  const absl::Status s = ProbeListen(addr);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(addr));
  EXPECT_THAT(s.message(), HasSubstr("in use"));
}

TEST(ProbeListenTest, ForeignAddressNamesReason) {
  // 198.18.0.0/15 (benchmarking) is never assigned to this host's interfaces.
  const absl::Status s = ProbeListen("198.19.255.254:2222");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("198.19.255.254:2222"));
  EXPECT_THAT(s.message(), HasSubstr("assign requested address"));
}

TEST(ProbeListenTest, MalformedEntry) {
  EXPECT_EQ(ProbeListen("no-port").code(), absl::StatusCode::kInvalidArgument);
}

TEST(WaitForHostNamesTest, ResolvableNamesReturnAtOnce) {
  EXPECT_TRUE(WaitForHostNames({"localhost:1", "127.0.0.1:2", "[::1]:3"},
                               absl::Seconds(5), nullptr)
                  .ok());
}

TEST(WaitForHostNamesTest, UnresolvableNameTimesOutNamingIt) {
  std::vector<std::string> logged;
  const absl::Status s = WaitForHostNames(
      {"localhost:1", "no-such-host.invalid:2222"}, absl::Milliseconds(300),
      [&](const std::string& m) { logged.push_back(m); },
      absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("no-such-host.invalid:2222"));
  ASSERT_EQ(logged.size(), 1u);  // Reported once, not on every retry.
  EXPECT_THAT(logged[0], HasSubstr("no-such-host.invalid"));
}

}  // namespace
}  // namespace downpour
