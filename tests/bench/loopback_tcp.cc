#include "tests/bench/loopback_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

absl::Status Errno(const char* call) {
  return absl::UnavailableError(
      absl::StrCat("loopback TCP: ", call, ": ", std::strerror(errno)));
}

// One stream; *start and *end are when its sender began and its receiver
// finished.
absl::StatusOr<LoopbackTcpResult> MeasureOneStream(
    const LoopbackTcpOptions& options,
    std::chrono::steady_clock::time_point* start_out,
    std::chrono::steady_clock::time_point* end_out) {
  if (options.total_bytes <= 0 || options.write_bytes <= 0 ||
      options.span_bytes < 0) {
    return absl::InvalidArgumentError("loopback TCP: sizes must be positive");
  }
  const int64_t span = std::max(options.span_bytes, options.write_bytes);
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno("bind");
  }
  if (::listen(listener.get(), 1) != 0) return Errno("listen");
  socklen_t len = sizeof(addr);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }

  // Receiver: accepts one connection and reads until total_bytes or EOF.
  int64_t received = 0;
  absl::Status recv_status;
  std::chrono::steady_clock::time_point recv_done;
  // Both buffers are allocated and touched before the clock starts.
  std::vector<char> recv_buf(span, '\x01');
  std::thread receiver([&] {
    Fd conn(::accept(listener.get(), nullptr, nullptr));
    if (conn.get() < 0) {
      recv_status = Errno("accept");
      return;
    }
    std::vector<char>& buf = recv_buf;
    int64_t at = 0;
    while (received < options.total_bytes) {
      if (at + options.write_bytes > span) at = 0;
      const ssize_t r = ::recv(conn.get(), buf.data() + at,
                               static_cast<size_t>(options.write_bytes), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        recv_status = Errno("recv");
        break;
      }
      if (r == 0) break;
      received += r;
      at += r;
    }
    recv_done = std::chrono::steady_clock::now();
  });

  absl::Status send_status;
  std::chrono::steady_clock::time_point start;
  {
    Fd sender(::socket(AF_INET, SOCK_STREAM, 0));
    if (sender.get() < 0) {
      send_status = Errno("socket");
    } else if (::connect(sender.get(), reinterpret_cast<sockaddr*>(&addr),
                         sizeof(addr)) != 0) {
      send_status = Errno("connect");
    } else {
      // Touch the buffer so page faults are not timed.
      std::vector<char> buf(span, '\x42');  // Touched: no faults timed.
      start = std::chrono::steady_clock::now();
      int64_t sent = 0, at = 0;
      while (sent < options.total_bytes) {
        if (at + options.write_bytes > span) at = 0;
        const size_t want = static_cast<size_t>(
            std::min<int64_t>(options.write_bytes, options.total_bytes - sent));
        const ssize_t w =
            ::send(sender.get(), buf.data() + at, want, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          send_status = Errno("send");
          break;
        }
        sent += w;
        at += w;
      }
    }
    // Closing the sender ends the receiver's loop in every case.
  }
  if (!send_status.ok()) {
    // The receiver may still be blocked in accept(): unblock it.
    ::shutdown(listener.get(), SHUT_RDWR);
  }
  receiver.join();
  if (!send_status.ok()) return send_status;
  if (!recv_status.ok()) return recv_status;
  if (received != options.total_bytes) {
    return absl::DataLossError(absl::StrCat("loopback TCP: received ", received,
                                            " of ", options.total_bytes, " bytes"));
  }
  LoopbackTcpResult result;
  result.bytes = received;
  result.seconds = std::chrono::duration<double>(recv_done - start).count();
  result.bytes_per_second = result.seconds > 0 ? received / result.seconds : 0;
  *start_out = start;
  *end_out = recv_done;
  return result;
}

}  // namespace

absl::StatusOr<LoopbackTcpResult> MeasureLoopbackTcp(
    const LoopbackTcpOptions& options) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError("loopback TCP: streams must be >= 1");
  }
  std::vector<absl::StatusOr<LoopbackTcpResult>> results(
      options.streams, absl::UnknownError("not run"));
  std::vector<std::chrono::steady_clock::time_point> starts(options.streams),
      ends(options.streams);
  LoopbackTcpOptions each = options;
  each.total_bytes = options.total_bytes / options.streams;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.streams; ++i) {
    threads.emplace_back([&, i] {
      results[i] = MeasureOneStream(each, &starts[i], &ends[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  LoopbackTcpResult total;
  for (const absl::StatusOr<LoopbackTcpResult>& r : results) {
    if (!r.ok()) return r.status();
    total.bytes += r->bytes;
  }
  // From the first sender's start to the last receiver's end.
  total.seconds = std::chrono::duration<double>(
                      *std::max_element(ends.begin(), ends.end()) -
                      *std::min_element(starts.begin(), starts.end()))
                      .count();
  total.bytes_per_second = total.seconds > 0 ? total.bytes / total.seconds : 0;
  return total;
}

}  // namespace downpour
