// A ps_server gives back the memory that refused
// oversize messages took. gRPC reads a message whole before refusing it as
// larger than the limit (rpc/grpc_config.h); its slices were freed into
// glibc's heap, which common/malloc_tuning.h keeps mapped, so one refused
// 200 MiB message left the server ~200 MiB larger and four at once ~370 MiB,
// for good. common/heap_trimmer.h now trims the heap once the shard has been
// idle for 2 s. Over a real ps_server process, its resident memory read from
// /proc.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DOWNPOUR_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DOWNPOUR_SANITIZER_ALLOCATOR 1
#endif
#endif

namespace downpour {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// A message three times the 64 MiB limit.
constexpr int64_t kOversizeBytes = 200 * kMiB;
// How far above its idle baseline the server may stay (it was +200 to
// +370 MiB before the trimmer; after it, within ~2 MiB here).
constexpr int64_t kMarginBytes = 64 * kMiB;

// A /proc/PID/status field in bytes (VmRSS, VmHWM), -1 if unreadable.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (in >> key) {
    if (key == field + ":") {
      int64_t kib = -1;
      in >> kib;
      return kib * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

// Sends `n` oversize pushes at once, each on a connection of its own; every
// one must be refused (RESOURCE_EXHAUSTED) and the server must go on.
void SendOversize(const std::string& host, int n,
                  const std::vector<char>& payload) {
  std::vector<std::thread> threads;
  std::vector<grpc::Status> status(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(-1);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("downpour.test_connection", i);
      grpc::GenericStub stub(grpc::CreateCustomChannel(
          host, grpc::InsecureChannelCredentials(), args));
      grpc::Slice slice(payload.data(), payload.size(),
                        grpc::Slice::STATIC_SLICE);
      grpc::ByteBuffer req(&slice, 1), resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
      absl::Notification done;
      stub.UnaryCall(&ctx, "/downpour.proto.ParameterServer/Push",
                     grpc::StubOptions(), &req, &resp, [&](grpc::Status s) {
                       status[i] = std::move(s);
                       done.Notify();
                     });
      done.WaitForNotification();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const grpc::Status& s : status) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
  }
}

// Polls the server's resident memory until it is within the margin of
// `baseline` or `limit` has passed; returns the last reading.
int64_t WaitForResident(pid_t pid, int64_t baseline, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  int64_t rss = StatusBytes(pid, "VmRSS");
  while (rss > baseline + kMarginBytes && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(200));
    rss = StatusBytes(pid, "VmRSS");
  }
  return rss;
}

TEST(HeapReleaseTest, RefusedOversizeMessagesGiveTheirMemoryBack) {
#ifdef DOWNPOUR_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc's heap (its "
                  "quarantine holds freed memory); run in the plain build";
#endif
  auto cluster = TestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const pid_t pid = (*cluster)->server(0)->pid();
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t baseline = StatusBytes(pid, "VmRSS");
  ASSERT_GT(baseline, 0);
  const std::vector<char> payload(kOversizeBytes, 0);

  // One, then four at once, then one again: each burst must be given back.
  for (int n : {1, 4, 1}) {
    SendOversize((*cluster)->hosts()[0], n, payload);
    ASSERT_TRUE((*cluster)->AllRunning());
    // The bursts did take memory (else this test would prove nothing).
    EXPECT_GT(StatusBytes(pid, "VmHWM"), baseline + 150 * kMiB);
    // Idle 2 s, then one trimmer period; 20 s leaves a loaded machine room.
    const int64_t rss = WaitForResident(pid, baseline, absl::Seconds(20));
    EXPECT_LE(rss, baseline + kMarginBytes)
        << n << " refused message(s) of " << kOversizeBytes / kMiB
        << " MiB left the server at " << rss / kMiB << " MiB resident, from "
        << baseline / kMiB << " MiB before";
  }
}

}  // namespace
}  // namespace downpour
