// File: common/metrics_scrape.h
//
// Test-only: reads a Prometheus endpoint (common/metrics_endpoint.h) over a
// real TCP connection, and picks counters out of its text.
//
//   const std::string text = ScrapeMetrics(host->metrics_port());
//   EXPECT_EQ(MetricSum(text, "downpour_rpc_requests_total", "method=\"Pull\""), 0);
#ifndef DOWNPOUR_COMMON_METRICS_SCRAPE_H_
#define DOWNPOUR_COMMON_METRICS_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace downpour {

// GET /metrics from 127.0.0.1:port; the whole response (empty when the
// connection fails).
inline std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req =
      "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

// The sum of the samples of `name` whose labels contain `label` (e.g.
// method="Pull"); 0 when there are none.
inline double MetricSum(const std::string& text, const std::string& name,
                        const std::string& label) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, name.size() + 1, name + "{") != 0) continue;
    const size_t close = line.find('}');
    if (close == std::string::npos) continue;
    if (line.substr(0, close).find(label) == std::string::npos) continue;
    sum += std::strtod(line.c_str() + close + 1, nullptr);
  }
  return sum;
}

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_METRICS_SCRAPE_H_
