#include "server/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

// A listening socket on 127.0.0.1 and its port.
int Listen(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(fd, 64), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// The process's open descriptors.
int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

TEST(ConnectionGuardTest, ListenerThatStopsAcceptingIsReported) {
  int port;
  const int listener = Listen(&port);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Connect(port));  // Never accepted.
  absl::Notification stalled;
  std::string why;
  int at_stall = 0;
  ConnectionGuardOptions o;
  o.ports = {port};
  o.interval = absl::Milliseconds(20);
  o.stall_after = absl::Milliseconds(200);
  o.on_stall = [&](const std::string& w) {
    why = w;
    at_stall = OpenDescriptors();
    stalled.Notify();
  };
  const int before = OpenDescriptors();
  auto guard = ConnectionGuard::Start(o);
  ASSERT_TRUE(guard.ok()) << guard.status();
  const int started = OpenDescriptors();
  // /proc/self/fd and the reserve the guard holds for a way out.
  EXPECT_GE(started - before, 5);
  EXPECT_TRUE(stalled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_NE(why.find("stopped accepting"), std::string::npos) << why;
  // The reserve is free by the time the stall is reported.
  EXPECT_LE(at_stall, started - 4);
  guard->reset();
  for (int fd : clients) ::close(fd);
  ::close(listener);
}

TEST(ConnectionGuardTest, AcceptingListenerIsNotReported) {
  int port;
  const int listener = Listen(&port);
  std::atomic<bool> stalled{false};
  ConnectionGuardOptions o;
  o.ports = {port};
  o.interval = absl::Milliseconds(20);
  o.stall_after = absl::Milliseconds(200);
  o.on_stall = [&](const std::string&) { stalled = true; };
  auto guard = ConnectionGuard::Start(o);
  ASSERT_TRUE(guard.ok()) << guard.status();
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    fds.push_back(Connect(port));
    fds.push_back(::accept(listener, nullptr, nullptr));
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(stalled.load());
  guard->reset();
  for (int fd : fds) ::close(fd);
  ::close(listener);
}

TEST(ConnectionGuardTest, ConnectionsAboveTheCapAreShutSilentOnesFirst) {
  int port;
  const int listener = Listen(&port);
  std::vector<int> clients, accepted;
  for (int i = 0; i < 10; ++i) {
    clients.push_back(Connect(port));
    accepted.push_back(::accept(listener, nullptr, nullptr));
  }
  absl::SleepFor(absl::Milliseconds(50));
  // The last client talks; the others are silent.
  ASSERT_EQ(::write(clients.back(), "x", 1), 1);
  absl::SleepFor(absl::Milliseconds(20));
  ConnectionGuardOptions o;
  o.ports = {port};
  o.max_connections = 4;
  o.interval = absl::Milliseconds(20);
  auto guard = ConnectionGuard::Start(o);
  ASSERT_TRUE(guard.ok()) << guard.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((*guard)->shut_down() < 6 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ((*guard)->shut_down(), 6);
  guard->reset();
  // The talker's connection is open: its byte is there to read.
  char c = 0;
  EXPECT_EQ(::recv(accepted.back(), &c, 1, MSG_DONTWAIT), 1);
  int ended = 0;
  for (size_t i = 0; i + 1 < accepted.size(); ++i) {
    ended += ::recv(accepted[i], &c, 1, MSG_DONTWAIT) == 0;
  }
  EXPECT_EQ(ended, 6);
  for (int fd : clients) ::close(fd);
  for (int fd : accepted) ::close(fd);
  ::close(listener);
}

TEST(ConnectionGuardTest, DefaultCapFitsTheJobAndTheFileLimit) {
  EXPECT_EQ(DefaultMaxConnections(2, 1 << 20), 96);
  EXPECT_EQ(DefaultMaxConnections(100, 1 << 20), 1664);
  EXPECT_EQ(DefaultMaxConnections(100, 1024), 512);
  EXPECT_GE(RaiseFileLimit(), 1);
}

}  // namespace
}  // namespace downpour
