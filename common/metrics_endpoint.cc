#include "common/metrics_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
#include "CivetServer.h"
#include "civetweb.h"

namespace downpour {
namespace {

// civetweb's first look at a request: anything but GET /metrics is answered
// 404 here (returning 1: handled).
int RefuseAllButMetrics(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const char* uri = info == nullptr ? nullptr : info->local_uri;
  if (uri != nullptr && std::strcmp(uri, "/metrics") == 0) return 0;
  mg_send_http_error(conn, 404, "%s", "only /metrics is served here");
  return 1;
}

// Why `bind`:`port` cannot be listened on ("Address already in use"), by
// binding a socket there as civetweb would; "" when that works. civetweb's
// own message only says that its context could not be made.
std::string ListenError(const std::string& bind, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = getaddrinfo(bind.empty() ? nullptr : bind.c_str(),
                                 service.c_str(), &hints, &res);
      rc != 0) {
    return gai_strerror(rc);
  }
  std::string why;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    why = std::strerror(errno);
  } else {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
      why = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(res);
  return why;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& bind, int port,
    std::shared_ptr<prometheus::Collectable> registry) {
  if (absl::Status s = CheckMetricsPort(port); !s.ok() || port < 0) {
    return s.ok() ? absl::InvalidArgumentError("metrics endpoint is off") : s;
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  const std::string address = absl::StrCat(bind, ":", port);
  try {
    // Several threads, and a short timeout for a request to arrive: a few
    // idle connections cannot hold every thread and blind the endpoint.
    // Only /metrics is served (civetweb would also serve /metrics/x and
    // /metricsX through the same handler).
    e->callbacks_ = std::make_unique<CivetCallbacks>();
    e->callbacks_->begin_request = &RefuseAllButMetrics;
    e->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{
            "listening_ports", address,
            "num_threads", absl::StrCat(kMetricsThreads),
            "request_timeout_ms", absl::StrCat(kMetricsRequestTimeoutMs)},
        e->callbacks_.get());
  } catch (const std::exception& ex) {
    const std::string why = ListenError(bind, port);
    return absl::UnavailableError(absl::StrCat(
        "could not serve metrics on ", address, ": ",
        why.empty() ? std::string(ex.what()) : why,
        " (--metrics_port: another port, 0 for any free one, -1 for none)"));
  }
  e->AddCollectable(std::move(registry));
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? port : ports[0];
  return e;
}

MetricsEndpoint::MetricsEndpoint() = default;
MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::AddCollectable(std::shared_ptr<prometheus::Collectable> c) {
  exposer_->RegisterCollectable(c);
  kept_.push_back(std::move(c));
}

absl::Status CheckMetricsPort(int port) {
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port must be -1 (off) or in [0, 65535], got ", port));
  }
  return absl::OkStatus();
}

}  // namespace downpour
