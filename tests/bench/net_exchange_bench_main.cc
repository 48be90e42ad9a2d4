// net_exchange_bench: push+pull goodput against remote servers, and raw TCP
// both ways at once between the same hosts (driven by
// tests/bench/netns_transport_bench.sh over emulated hosts).
//
//   net_exchange_bench --bench_mode=tcp_sink --tcp_port=7000       # on host A
//   net_exchange_bench --bench_mode=tcp --host=A --tcp_port=7000   # on host B
//   net_exchange_bench --bench_mode=grpc --ps_hosts=A:2222 --mb=64 # ps_server on A
//
// --ps_hosts is ps_worker's (common/cluster_spec_flags.h), the client's
// transport flags too (--calls_in_flight, --part_kb, ...:
// worker/transport_flags.h, with ps_worker's defaults), and --seconds is
// the benchmarks' (tests/bench/bench_flags.h).
//
// Each prints one line `RESULT {"mode":..,"bytes_per_sec":..,...}`, where
// bytes count both directions: for tcp, one stream B->A and one A->B at
// once; for grpc, each PushPull round moves the model up and back down.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/cluster_spec_flags.h"
#include "common/malloc_tuning.h"
#include "common/sharding.h"
#include "tests/bench/bench_flags.h"
#include "worker/grpc_ps_client.h"
#include "worker/transport_flags.h"

ABSL_FLAG(std::string, bench_mode, "grpc", "grpc, tcp or tcp_sink.");
ABSL_FLAG(std::string, host, "", "--bench_mode=tcp: the sink's address.");
ABSL_FLAG(int, tcp_port, 7000, "--bench_mode=tcp or tcp_sink: the sink's port.");
ABSL_FLAG(int64_t, mb, 64, "--bench_mode=grpc: model size, MiB.");

namespace {

constexpr int64_t kBuf = 1 << 20;

void Fail(const char* what) {
  std::fprintf(stderr, "net_exchange_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Sink: each accepted connection says 'U' (it uploads: read and drop) or
// 'D' (it downloads: write until it closes).
void TcpSink(int port) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Fail("bind");
  if (listen(lfd, 16) != 0) Fail("listen");
  while (true) {
    const int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) Fail("accept");
    std::thread([fd] {
      std::vector<char> buf(kBuf, 1);
      char role = 0;
      if (recv(fd, &role, 1, MSG_WAITALL) != 1) role = 0;
      if (role == 'U') {
        while (recv(fd, buf.data(), buf.size(), 0) > 0) {}
      } else if (role == 'D') {
        while (send(fd, buf.data(), buf.size(), MSG_NOSIGNAL) > 0) {}
      }
      close(fd);
    }).detach();
  }
}

int Connect(const std::string& host, int port, char role) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    Fail("getaddrinfo");
  }
  const int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) Fail("connect");
  freeaddrinfo(res);
  if (send(fd, &role, 1, 0) != 1) Fail("send role");
  return fd;
}

// One stream each way at once for `seconds`; bytes of both over the time.
void TcpBoth(const std::string& host, int port, double seconds) {
  const int up = Connect(host, port, 'U');
  const int down = Connect(host, port, 'D');
  std::atomic<bool> stop{false};
  std::atomic<int64_t> sent{0}, received{0};
  const absl::Time start = absl::Now();
  std::thread writer([&] {
    std::vector<char> buf(kBuf, 2);
    while (!stop) {
      const ssize_t n = send(up, buf.data(), buf.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += n;
    }
  });
  std::thread reader([&] {
    std::vector<char> buf(kBuf);
    while (!stop) {
      const ssize_t n = recv(down, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      received += n;
    }
  });
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  shutdown(up, SHUT_RDWR);
  shutdown(down, SHUT_RDWR);
  writer.join();
  reader.join();
  close(up);
  close(down);
  std::printf("RESULT {\"mode\":\"tcp\",\"bytes_per_sec\":%.0f,\"up\":%.0f,"
              "\"down\":%.0f,\"seconds\":%.2f}\n",
              (sent + received) / elapsed, sent / elapsed, received / elapsed,
              elapsed);
}

int Grpc(double seconds) {
  downpour::GrpcClientOptions o;
  if (absl::Status s = downpour::TransportOptionsFromFlags(&o); !s.ok()) {
    std::fprintf(stderr, "net_exchange_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  o.hosts = absl::StrSplit(downpour::ClusterSpecInputsFromFlags("worker").ps_hosts,
                           ',', absl::SkipEmpty());
  o.security.allow_insecure = true;
  auto client = downpour::NewGrpcParameterClient(o);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  const int64_t n = (absl::GetFlag(FLAGS_mb) << 20) / 4;
  downpour::ModelLayout layout;
  layout.tensors = {{"w", {n}}};
  layout.num_shards = static_cast<int>(o.hosts.size());
  std::vector<float> params(n, 0.5f), grads(n, 0.0f);
  if (auto s = (*client)->Declare(layout, params); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<int64_t> versions;
  if (auto s = (*client)->Pull(absl::MakeSpan(params), &versions); !s.ok()) return 1;
  int64_t rounds = 0, seq = 0;
  // One warm-up round, then timed rounds.
  absl::Time start;
  while (true) {
    if (seq == 1) start = absl::Now();
    absl::Status s = (*client)->PushPull(++seq, grads, versions,
                                         absl::MakeSpan(params), &versions, {});
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    if (seq > 1) ++rounds;
    if (seq > 1 && absl::ToDoubleSeconds(absl::Now() - start) >= seconds) break;
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double bytes = 2.0 * n * 4 * rounds;
  std::printf("RESULT {\"mode\":\"grpc\",\"bytes_per_sec\":%.0f,\"rounds\":%lld,"
              "\"seconds\":%.2f,\"model_mb\":%lld,\"shards\":%d}\n",
              bytes / elapsed, static_cast<long long>(rounds), elapsed,
              static_cast<long long>(absl::GetFlag(FLAGS_mb)), layout.num_shards);
  return params[0] == 0.5f ? 0 : 1;  // Zero gradients leave values as they were.
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  downpour::TuneMallocForLargeBuffers();
  absl::StatusOr<downpour::BenchFlags> bench = downpour::BenchFlagsFromFlags();
  if (!bench.ok()) {
    std::fprintf(stderr, "net_exchange_bench: %s\n",
                 std::string(bench.status().message()).c_str());
    return 2;
  }
  const std::string mode = absl::GetFlag(FLAGS_bench_mode);
  if (mode == "tcp_sink") TcpSink(absl::GetFlag(FLAGS_tcp_port));
  if (mode == "tcp") {
    TcpBoth(absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_tcp_port),
            bench->seconds);
    return 0;
  }
  if (mode == "grpc") return Grpc(bench->seconds);
  std::fprintf(stderr, "--bench_mode must be grpc, tcp or tcp_sink\n");
  return 2;
}
