#include "server/connection_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"

namespace downpour {
namespace {

// The local port of socket `fd`, or -1 when it is not an IPv4 or IPv6
// socket.
int LocalPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  if (a.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  }
  if (a.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  }
  return -1;
}

// The entries of the open folder `dir_fd` (/proc/self/fd), read with
// getdents64 so that no new descriptor is needed.
std::vector<std::string> FdNames(int dir_fd) {
  std::vector<std::string> names;
  if (::lseek(dir_fd, 0, SEEK_SET) != 0) return names;
  alignas(8) char buf[1 << 14];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir_fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + at);
      names.emplace_back(e->d_name);
      at += e->d_reclen;
    }
  }
  return names;
}

}  // namespace

int64_t RaiseFileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  if (r.rlim_cur < r.rlim_max) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  return r.rlim_cur == RLIM_INFINITY ? int64_t{1} << 40
                                     : static_cast<int64_t>(r.rlim_cur);
}

int DefaultMaxConnections(int num_workers, int64_t file_limit) {
  const int64_t wanted = 64 + 16 * static_cast<int64_t>(std::max(num_workers, 1));
  const int64_t room = std::max<int64_t>(16, file_limit / 2);
  return static_cast<int>(std::min({wanted, room, int64_t{1} << 20}));
}

absl::StatusOr<std::unique_ptr<ConnectionGuard>> ConnectionGuard::Start(
    ConnectionGuardOptions options) {
  if (options.ports.empty() || options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connection guard: need a port and max_connections >= 1, got ",
        options.ports.size(), " ports and ", options.max_connections));
  }
  std::unique_ptr<ConnectionGuard> g(new ConnectionGuard(std::move(options)));
  g->fd_dir_ = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g->fd_dir_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        "connection guard: cannot read /proc/self/fd: ", std::strerror(errno)));
  }
  // Descriptors held back for the process's way out once it has run out:
  // released when a stall is reported (and at the end), they let the
  // shutdown that follows open its files (a final snapshot) and pipes.
  for (int i = 0; i < kReservedDescriptors; ++i) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) g->reserve_.push_back(fd);
  }
  g->thread_ = std::thread([raw = g.get()] { raw->Loop(); });
  return g;
}

ConnectionGuard::ConnectionGuard(ConnectionGuardOptions options)
    : options_(std::move(options)) {}

ConnectionGuard::~ConnectionGuard() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (fd_dir_ >= 0) ::close(fd_dir_);
  ReleaseReserve();
}

int64_t ConnectionGuard::shut_down() const {
  absl::MutexLock l(&mu_);
  return shut_down_;
}

void ConnectionGuard::ReleaseReserve() {
  for (int fd : reserve_) ::close(fd);
  reserve_.clear();
}

void ConnectionGuard::Loop() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.interval)) {
        return;
      }
    }
    Check();
  }
}

void ConnectionGuard::Check() {
  const absl::flat_hash_set<int> ports(options_.ports.begin(),
                                       options_.ports.end());
  // One pass over the process's own descriptors: its TCP sockets bound to
  // the server's ports are the listeners and the connections they
  // accepted (a connection this process opened has an ephemeral local
  // port). Unlike /proc/net/tcp, which walks the kernel's whole table of
  // connections, this costs a few system calls per descriptor.
  struct Conn {
    uint32_t silent_ms;
    int fd;
    uint64_t inode;
  };
  std::vector<Conn> conns;
  uint64_t queued = 0;
  absl::flat_hash_set<uint64_t> accepted;  // Our connections' inodes.
  for (const std::string& name : FdNames(fd_dir_)) {
    int fd;
    if (!absl::SimpleAtoi(name, &fd)) continue;
    char link[64];
    const ssize_t n = ::readlinkat(fd_dir_, name.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    uint64_t inode;
    absl::string_view l(link, static_cast<size_t>(n));
    if (!absl::ConsumePrefix(&l, "socket:[") || !absl::ConsumeSuffix(&l, "]") ||
        !absl::SimpleAtoi(l, &inode) || !ports.contains(LocalPort(fd))) {
      continue;
    }
    tcp_info info{};
    socklen_t len = sizeof(info);
    // Fails for anything but TCP.
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    if (info.tcpi_state == TCP_LISTEN) {
      queued += info.tcpi_unacked;  // A listener's accept queue.
    } else if (info.tcpi_state == TCP_ESTABLISHED) {
      accepted.insert(inode);
      conns.push_back({info.tcpi_last_data_recv, fd, inode});
    }
  }

  // A listener that stopped accepting: a queue that stays full while no
  // connection is accepted.
  const absl::Time now = absl::Now();
  bool progress = false;
  for (uint64_t inode : accepted) {
    if (!last_accepted_.contains(inode)) {
      progress = true;
      break;
    }
  }
  last_accepted_ = accepted;
  if (queued == 0 || progress) {
    queued_since_ = absl::InfiniteFuture();
  } else if (queued_since_ == absl::InfiniteFuture()) {
    queued_since_ = now;
  } else if (!stalled_ && now - queued_since_ >= options_.stall_after) {
    stalled_ = true;
    ReleaseReserve();
    if (options_.on_stall) {
      options_.on_stall(absl::StrCat(
          "the listener stopped accepting connections: ", queued,
          " have waited in its queue for ",
          absl::FormatDuration(now - queued_since_),
          " (gRPC stops accepting after an accept fails, e.g. when file "
          "descriptors run out)"));
    }
  }

  const int64_t excess =
      static_cast<int64_t>(accepted.size()) - options_.max_connections;
  if (excess <= 0) return;
  std::sort(conns.begin(), conns.end(), [](const Conn& a, const Conn& b) {
    return a.silent_ms > b.silent_ms;
  });
  int64_t closed = 0;
  for (const Conn& c : conns) {
    if (closed >= excess) break;
    struct stat st;
    // The descriptor may have been closed and reused since it was listed.
    if (::fstat(c.fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != c.inode) {
      continue;
    }
    // gRPC sees the connection end and closes the descriptor itself.
    if (::shutdown(c.fd, SHUT_RDWR) == 0) ++closed;
  }
  if (closed > 0) {
    {
      absl::MutexLock l(&mu_);
      shut_down_ += closed;
    }
    if (options_.log) {
      options_.log(absl::StrCat(
          "closed ", closed, " connections silent longest: ", accepted.size(),
          " were open, above --max_connections=", options_.max_connections));
    }
  }
}

}  // namespace downpour
