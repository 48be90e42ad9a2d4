// The retry policy as a pure function, and FanOut against a real gRPC server
// on loopback (a generic callback service that echoes each request or fails
// it as the test says): replies consumed, calls in flight per connection
// bounded, transient failures retried, others reported with their peer.
#include "rpc/fan_out.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rpc/grpc_config.h"

namespace downpour {
namespace {

constexpr char kMethod[] = "/downpour.test.Echo/Echo";

// ---- The policy -------------------------------------------------------------

TEST(RetryPolicyTest, TransientFailuresAreRetriedUpToMaxAttempts) {
  RetryPolicy p;
  p.max_attempts = 3;
  for (grpc::StatusCode code : {grpc::StatusCode::UNAVAILABLE,
                                grpc::StatusCode::DEADLINE_EXCEEDED}) {
    const grpc::Status s(code, "");
    EXPECT_TRUE(ShouldRetry(p, s, 1, absl::ZeroDuration())) << code;
    EXPECT_TRUE(ShouldRetry(p, s, 2, absl::Seconds(1))) << code;
    EXPECT_FALSE(ShouldRetry(p, s, 3, absl::Seconds(1))) << code;
  }
}

TEST(RetryPolicyTest, ReconnectTimeoutKeepsRetryingTransientFailures) {
  RetryPolicy p;
  p.max_attempts = 2;
  p.reconnect_timeout = absl::Seconds(10);
  const grpc::Status down(grpc::StatusCode::UNAVAILABLE, "");
  EXPECT_TRUE(ShouldRetry(p, down, 7, absl::Seconds(9)));
  EXPECT_FALSE(ShouldRetry(p, down, 7, absl::Seconds(10)));
  // An overloaded server is not waited for beyond max_attempts.
  const grpc::Status overloaded(grpc::StatusCode::RESOURCE_EXHAUSTED, "");
  EXPECT_TRUE(ShouldRetry(p, overloaded, 1, absl::ZeroDuration()));
  EXPECT_FALSE(ShouldRetry(p, overloaded, 2, absl::ZeroDuration()));
}

TEST(RetryPolicyTest, OtherFailuresAreNotRetried) {
  RetryPolicy p;
  p.reconnect_timeout = absl::Hours(1);
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::CANCELLED,
        grpc::StatusCode::INTERNAL, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::FAILED_PRECONDITION,
        grpc::StatusCode::PERMISSION_DENIED,
        grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::UNIMPLEMENTED}) {
    EXPECT_FALSE(ShouldRetry(p, grpc::Status(code, ""), 1, absl::ZeroDuration()))
        << code;
  }
}

TEST(RetryPolicyTest, BackoffDoublesUpToTwoSeconds) {
  EXPECT_EQ(RetryBackoff(1), absl::Milliseconds(200));
  EXPECT_EQ(RetryBackoff(2), absl::Milliseconds(400));
  EXPECT_EQ(RetryBackoff(3), absl::Milliseconds(800));
  EXPECT_EQ(RetryBackoff(4), absl::Milliseconds(1600));
  EXPECT_EQ(RetryBackoff(5), absl::Seconds(2));
  EXPECT_EQ(RetryBackoff(40), absl::Seconds(2));
  // Clients of shards with standbys cap it lower.
  EXPECT_EQ(RetryBackoff(1, absl::Milliseconds(50)), absl::Milliseconds(50));
  EXPECT_EQ(RetryBackoff(40, absl::Milliseconds(50)), absl::Milliseconds(50));
}

// ---- Against a server -------------------------------------------------------

// How the server answers one arrival of a request: after `delay`, with
// `status` (an OK status echoes the request).
struct Answer {
  grpc::Status status;
  absl::Duration delay = absl::ZeroDuration();
};
// `arrival` counts the arrivals of this request's bytes, from 1.
using Decide = std::function<Answer(const std::string& request, int arrival)>;

std::string Text(const grpc::ByteBuffer& b) {
  std::string out;
  ByteBufferBytes(b, &out);
  return out;
}

grpc::ByteBuffer Buffer(const std::string& text) {
  grpc::Slice s(text);
  return grpc::ByteBuffer(&s, 1);
}

// A loopback server of one generic method. Records, per client connection
// (its peer address), the most calls it had in flight at once.
class EchoServer : public grpc::CallbackGenericService {
 public:
  // Port 0 picks a free one.
  EchoServer(Decide decide, int port = 0) : decide_(std::move(decide)) {
    grpc::ServerBuilder b;
    b.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                       grpc::InsecureServerCredentials(), &port_);
    b.RegisterCallbackGenericService(this);
    server_ = b.BuildAndStart();
  }
  ~EchoServer() override {
    server_->Shutdown();
    server_->Wait();
  }

  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  std::map<std::string, int> MostInFlightPerPeer() const {
    absl::MutexLock l(&mu_);
    return most_;
  }
  int Arrivals(const std::string& request) const {
    absl::MutexLock l(&mu_);
    auto it = arrivals_.find(request);
    return it == arrivals_.end() ? 0 : it->second;
  }
  int TotalArrivals() const {
    absl::MutexLock l(&mu_);
    int n = 0;
    for (const auto& [request, count] : arrivals_) n += count;
    return n;
  }

 private:
  // gRPC's reactor API. The server owns its reactors until it is destroyed:
  // a call cancelled past its deadline can reach OnDone while OnReadDone is
  // still running on another thread, so a reactor deleting itself there
  // would be freed under the running reaction.
  class Reactor : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(EchoServer* server, std::string peer)
        : server_(server), peer_(std::move(peer)) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));
        return;
      }
      const Answer a = server_->Arrive(peer_, Text(request_));
      absl::SleepFor(a.delay);
      server_->Leave(peer_);
      if (a.status.ok()) {
        StartWriteAndFinish(&request_, grpc::WriteOptions(), grpc::Status::OK);
      } else {
        Finish(a.status);
      }
    }
    void OnDone() override {}

   private:
    EchoServer* const server_;  // Not owned.
    const std::string peer_;
    grpc::ByteBuffer request_;
  };

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    auto reactor = std::make_unique<Reactor>(this, ctx->peer());
    Reactor* r = reactor.get();
    absl::MutexLock l(&mu_);
    reactors_.push_back(std::move(reactor));
    return r;
  }

  Answer Arrive(const std::string& peer, const std::string& request) {
    int arrival;
    {
      absl::MutexLock l(&mu_);
      arrival = ++arrivals_[request];
      most_[peer] = std::max(most_[peer], ++in_flight_[peer]);
    }
    return decide_(request, arrival);
  }
  void Leave(const std::string& peer) {
    absl::MutexLock l(&mu_);
    --in_flight_[peer];
  }

  const Decide decide_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> arrivals_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> most_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Reactor>> reactors_ ABSL_GUARDED_BY(mu_);
};

// `connections` channels to `address`, each its own TCP connection.
std::vector<std::unique_ptr<grpc::GenericStub>> Connect(
    const std::string& address, int connections) {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("downpour.test_connection", c);
    stubs.push_back(std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

// Calls whose requests are "call <i>", call i on connection i % connections;
// the replies land in `resp`.
class EchoCalls {
 public:
  EchoCalls(const std::string& address, int n, int connections)
      : stubs_(Connect(address, connections)), resp_(n) {
    for (int i = 0; i < n; ++i) req_.push_back(Buffer(Request(i)));
    calls_.what = "Echo";
    calls_.count = n;
    calls_.peer_of = [address](int i) {
      return absl::StrCat("peer ", i, " (", address, ")");
    };
    calls_.lane_of = [connections](int i) { return i % connections; };
    calls_.start = [this](int i, grpc::ClientContext* ctx, auto done) {
      stubs_[i % stubs_.size()]->UnaryCall(ctx, kMethod, grpc::StubOptions(),
                                           &req_[i], &resp_[i], std::move(done));
    };
    calls_.reset = [this](int i) {
      resp_[i].Clear();
      resets_++;
    };
  }

  static std::string Request(int i) { return absl::StrCat("call ", i); }
  FanOutCalls& calls() { return calls_; }
  std::string Reply(int i) const { return Text(resp_[i]); }
  int resets() const { return resets_; }

 private:
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::vector<grpc::ByteBuffer> req_;
  std::vector<grpc::ByteBuffer> resp_;
  std::atomic<int> resets_{0};
  FanOutCalls calls_;
};

Decide EchoAfter(absl::Duration delay) {
  return [delay](const std::string&, int) { return Answer{grpc::Status::OK, delay}; };
}

TEST(FanOutTest, RepliesAreConsumedAsTheyArrive) {
  EchoServer server(EchoAfter(absl::ZeroDuration()));
  ASSERT_TRUE(server.ok());
  constexpr int kCalls = 24;
  EchoCalls echo(server.address(), kCalls, 3);
  absl::Mutex mu;
  std::vector<int> consumed;
  echo.calls().on_ok = [&](int i) {
    EXPECT_EQ(echo.Reply(i), EchoCalls::Request(i));
    absl::MutexLock l(&mu);
    consumed.push_back(i);
    return absl::OkStatus();
  };
  FanOutOptions o;
  o.window = 2;
  ASSERT_TRUE(FanOut(echo.calls(), o).ok());
  std::sort(consumed.begin(), consumed.end());
  ASSERT_EQ(consumed.size(), static_cast<size_t>(kCalls));
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(consumed[i], i);
  EXPECT_EQ(echo.resets(), 0);
}

TEST(FanOutTest, AtMostWindowCallsInFlightPerConnection) {
  for (int window : {1, 3}) {
    EchoServer server(EchoAfter(absl::Milliseconds(3)));
    ASSERT_TRUE(server.ok());
    EchoCalls echo(server.address(), 30, 2);
    FanOutOptions o;
    o.window = window;
    ASSERT_TRUE(FanOut(echo.calls(), o).ok());
    const std::map<std::string, int> most = server.MostInFlightPerPeer();
    EXPECT_EQ(most.size(), 2u) << "two connections";
    for (const auto& [peer, n] : most) {
      EXPECT_GE(n, 1) << peer;
      EXPECT_LE(n, window) << peer;
    }
    for (int i = 0; i < 30; ++i) EXPECT_EQ(echo.Reply(i), EchoCalls::Request(i));
  }
}

TEST(FanOutTest, TransientFailuresAreSentAgain) {
  // Each request's first arrival fails as a restarting server's would.
  EchoServer server([](const std::string&, int arrival) {
    return Answer{arrival == 1
                      ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting")
                      : grpc::Status::OK};
  });
  ASSERT_TRUE(server.ok());
  constexpr int kCalls = 6;
  EchoCalls echo(server.address(), kCalls, 2);
  FanOutOptions o;
  o.window = 1;
  o.retry.max_attempts = 2;
  ASSERT_TRUE(FanOut(echo.calls(), o).ok());
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(server.Arrivals(EchoCalls::Request(i)), 2) << i;
    EXPECT_EQ(echo.Reply(i), EchoCalls::Request(i));
  }
  EXPECT_EQ(echo.resets(), kCalls);
}

TEST(FanOutTest, CallsPastTheirDeadlineAreSentAgain) {
  EchoServer server([](const std::string&, int arrival) {
    return Answer{grpc::Status::OK, arrival == 1 ? absl::Milliseconds(1300)
                                                 : absl::ZeroDuration()};
  });
  ASSERT_TRUE(server.ok());
  EchoCalls echo(server.address(), 2, 2);
  FanOutOptions o;
  o.timeout = absl::Seconds(1);
  o.retry.max_attempts = 2;
  ASSERT_TRUE(FanOut(echo.calls(), o).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(server.Arrivals(EchoCalls::Request(i)), 2) << i;
    EXPECT_EQ(echo.Reply(i), EchoCalls::Request(i));
  }
}

TEST(FanOutTest, PersistentFailureNamesThePeerAndTheAttempts) {
  EchoServer server([](const std::string& request, int) {
    return Answer{request == EchoCalls::Request(1)
                      ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")
                      : grpc::Status::OK};
  });
  ASSERT_TRUE(server.ok());
  EchoCalls echo(server.address(), 3, 1);
  FanOutOptions o;
  o.retry.max_attempts = 3;
  const absl::Time start = absl::Now();
  const absl::Status s = FanOut(echo.calls(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), absl::StrCat("Echo to peer 1 (", server.address(),
                                      ") after 3 attempts: down"));
  EXPECT_EQ(server.Arrivals(EchoCalls::Request(1)), 3);
  EXPECT_EQ(server.Arrivals(EchoCalls::Request(0)), 1);
  // Two backoffs: 200 ms and 400 ms.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(600));
}

TEST(FanOutTest, OtherFailuresAreReportedAtOnce) {
  EchoServer server([](const std::string&, int) {
    return Answer{grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad")};
  });
  ASSERT_TRUE(server.ok());
  EchoCalls echo(server.address(), 1, 1);
  FanOutOptions o;
  o.retry.reconnect_timeout = absl::Hours(1);
  const absl::Status s = FanOut(echo.calls(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat("Echo to peer 0 (", server.address(), "): bad"));
  EXPECT_EQ(server.TotalArrivals(), 1);
}

TEST(FanOutTest, AReplyThatCannotBeConsumedStopsTheQueuedCalls) {
  EchoServer server(EchoAfter(absl::Milliseconds(2)));
  ASSERT_TRUE(server.ok());
  constexpr int kCalls = 10;
  EchoCalls echo(server.address(), kCalls, 1);
  echo.calls().on_ok = [](int i) {
    return i == 0 ? absl::DataLossError("unreadable reply") : absl::OkStatus();
  };
  FanOutOptions o;
  o.window = 1;
  const absl::Status s = FanOut(echo.calls(), o);
  EXPECT_EQ(s, absl::DataLossError("unreadable reply"));
  // Call 1 starts as call 0's reply is read; nothing after it.
  EXPECT_LE(server.TotalArrivals(), 2);
}

TEST(FanOutTest, WaitForReadyWaitsForAServerStillStarting) {
  int port;
  {
    EchoServer probe(EchoAfter(absl::ZeroDuration()));
    ASSERT_TRUE(probe.ok());
    port = probe.port();
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  FanOutOptions o;
  o.timeout = absl::Seconds(20);
  o.retry.max_attempts = 1;
  {
    // Without it, a server that is not up fails the call at once.
    EchoCalls echo(address, 1, 1);
    EXPECT_EQ(FanOut(echo.calls(), o).code(), absl::StatusCode::kUnavailable);
  }
  o.wait_for_ready = true;
  EchoCalls echo(address, 1, 1);
  std::unique_ptr<EchoServer> late;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    late = std::make_unique<EchoServer>(EchoAfter(absl::ZeroDuration()), port);
  });
  const absl::Status s = FanOut(echo.calls(), o);
  starter.join();
  ASSERT_TRUE(late->ok());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(echo.Reply(0), EchoCalls::Request(0));
}

}  // namespace
}  // namespace downpour
