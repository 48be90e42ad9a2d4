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
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"

namespace downpour {
namespace {

constexpr int kListen = 0x0A;
constexpr int kEstablished = 0x01;

// The whole of a /proc file from its start, read through an open
// descriptor.
std::string ReadFromStart(int fd) {
  std::string out;
  if (fd < 0 || ::lseek(fd, 0, SEEK_SET) != 0) return out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// What the guard needs of /proc/net/tcp{,6}: per line, the local port, the
// state, the receive queue (for a listener: its accept queue) and the inode.
struct SocketLine {
  int port = 0;
  int state = 0;
  uint64_t rx_queue = 0;
  uint64_t inode = 0;
};

void ParseTcpTable(const std::string& text, std::vector<SocketLine>* out) {
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (header) {
      header = false;
      continue;
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10) continue;
    SocketLine s;
    const size_t colon = f[1].rfind(':');
    const size_t queues = f[4].find(':');
    uint32_t port = 0, state = 0;
    uint64_t rx = 0, inode = 0;
    if (colon == absl::string_view::npos || queues == absl::string_view::npos ||
        !absl::SimpleHexAtoi(f[1].substr(colon + 1), &port) ||
        !absl::SimpleHexAtoi(f[3], &state) ||
        !absl::SimpleHexAtoi(f[4].substr(queues + 1), &rx) ||
        !absl::SimpleAtoi(f[9], &inode)) {
      continue;
    }
    s.port = static_cast<int>(port);
    s.state = static_cast<int>(state);
    s.rx_queue = rx;
    s.inode = inode;
    out->push_back(s);
  }
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
  g->tcp_fd_ = ::open("/proc/net/tcp", O_RDONLY | O_CLOEXEC);
  g->tcp6_fd_ = ::open("/proc/net/tcp6", O_RDONLY | O_CLOEXEC);
  g->fd_dir_ = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g->tcp_fd_ < 0 || g->fd_dir_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        "connection guard: cannot read /proc/net/tcp or /proc/self/fd: ",
        std::strerror(errno)));
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
  for (int fd : {tcp_fd_, tcp6_fd_, fd_dir_}) {
    if (fd >= 0) ::close(fd);
  }
}

int64_t ConnectionGuard::shut_down() const {
  absl::MutexLock l(&mu_);
  return shut_down_;
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
  std::vector<SocketLine> lines;
  ParseTcpTable(ReadFromStart(tcp_fd_), &lines);
  ParseTcpTable(ReadFromStart(tcp6_fd_), &lines);
  const absl::flat_hash_set<int> ports(options_.ports.begin(),
                                       options_.ports.end());
  uint64_t queued = 0;
  absl::flat_hash_set<uint64_t> accepted;  // Our connections' inodes.
  for (const SocketLine& s : lines) {
    if (!ports.contains(s.port)) continue;
    if (s.state == kListen) queued += s.rx_queue;
    // Inode 0: still in the accept queue, no descriptor yet.
    if (s.state == kEstablished && s.inode != 0) accepted.insert(s.inode);
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
  // Our descriptors of those connections, with how long each has been
  // silent.
  struct Conn {
    uint32_t silent_ms;
    int fd;
    uint64_t inode;
  };
  std::vector<Conn> conns;
  for (const std::string& name : FdNames(fd_dir_)) {
    int fd;
    if (!absl::SimpleAtoi(name, &fd)) continue;
    char link[64];
    const ssize_t n = ::readlinkat(fd_dir_, name.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    uint64_t inode;
    absl::string_view l(link, static_cast<size_t>(n));
    if (!absl::ConsumePrefix(&l, "socket:[") || !absl::ConsumeSuffix(&l, "]") ||
        !absl::SimpleAtoi(l, &inode) || !accepted.contains(inode)) {
      continue;
    }
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    conns.push_back({info.tcpi_last_data_recv, fd, inode});
  }
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
