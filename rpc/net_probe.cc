#include "rpc/net_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace downpour {
namespace {

struct Split {
  std::string host;  // Without brackets.
  std::string port;
};

absl::StatusOr<Split> SplitHostPort(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host_port, "' is not host:port"));
  }
  Split s{host_port.substr(0, colon), host_port.substr(colon + 1)};
  if (s.host.size() >= 2 && s.host.front() == '[' && s.host.back() == ']') {
    s.host = s.host.substr(1, s.host.size() - 2);
  }
  return s;
}

// getaddrinfo for a TCP socket; the error text on failure.
absl::Status Resolve(const Split& s, bool passive, addrinfo** out) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const int rc = getaddrinfo(s.host.c_str(), s.port.c_str(), &hints, out);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve '", s.host, "': ", gai_strerror(rc)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProbeListen(const std::string& host_port) {
  absl::StatusOr<Split> s = SplitHostPort(host_port);
  if (!s.ok()) return s.status();
  addrinfo* list = nullptr;
  if (absl::Status r = Resolve(*s, /*passive=*/true, &list); !r.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host_port, ": ", r.message()));
  }
  std::string reason = "no address";
  bool ok = false;
  for (addrinfo* a = list; a != nullptr && !ok; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else {
      reason = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(list);
  if (ok) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", host_port, ": ", reason));
}

absl::Status WaitForHostNames(const std::vector<std::string>& host_ports,
                              absl::Duration timeout,
                              const std::function<void(const std::string&)>& log,
                              absl::Duration retry_every) {
  const absl::Time deadline = absl::Now() + timeout;
  std::set<std::string> reported;
  for (const std::string& entry : host_ports) {
    absl::StatusOr<Split> s = SplitHostPort(entry);
    if (!s.ok()) return s.status();
    while (true) {
      addrinfo* list = nullptr;
      const absl::Status r = Resolve(*s, /*passive=*/false, &list);
      if (r.ok()) {
        freeaddrinfo(list);
        break;
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "gave up resolving ", entry, " after ",
            absl::FormatDuration(timeout), ": ", r.message()));
      }
      if (reported.insert(entry).second && log) {
        log(absl::StrCat(r.message(), "; retrying until ",
                         absl::FormatDuration(timeout), " have passed"));
      }
      absl::SleepFor(retry_every);
    }
  }
  return absl::OkStatus();
}

}  // namespace downpour
