#include "worker/shard_transport.h"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"

namespace downpour {

ShardTransport::ShardTransport(const ShardTransportOptions& options,
                               const ClientSecurity& security)
    : options_(options),
      adaptive_(options.max_calls_in_flight_per_connection < 0
                    ? std::make_unique<AdaptiveWindow>(AdaptiveWindowOptions())
                    : nullptr) {
  const bool standbys = !options_.standby_hosts.empty();
  if (standbys) {
    const size_t n = options_.hosts.size();
    active_ = std::make_unique<std::atomic<int>[]>(n);
    answered_ = std::make_unique<std::atomic<int>[]>(n);
    for (size_t s = 0; s < n; ++s) {
      active_[s].store(0);
      answered_[s].store(0);
    }
  }
  stubs_.resize(standbys ? 2 : 1);
  generic_.resize(standbys ? 2 : 1);
  for (size_t a = 0; a < stubs_.size(); ++a) {
  for (const std::string& host :
       a == 0 ? options_.hosts : options_.standby_hosts) {
    std::vector<std::unique_ptr<grpc::GenericStub>> conns;
    for (int c = 0; c < options_.connections_per_shard; ++c) {
      grpc::ChannelArguments args;
      ConfigureChannelArguments(&args);
      // A private subchannel pool and a distinct argument give each
      // channel its own TCP connection.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("downpour.connection_index", c);
      // A server that is starting, or restarting, is found within a second
      // (gRPC's default backoff grows to two minutes between attempts).
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      std::shared_ptr<grpc::Channel> ch = *CreateChannel(host, security, args);
      if (c == 0) stubs_[a].push_back(proto::ParameterServer::NewStub(ch));
      conns.push_back(std::make_unique<grpc::GenericStub>(ch));
    }
    generic_[a].push_back(std::move(conns));
  }
  }
}

std::string ShardTransport::ShardName(int shard) const {
  return absl::StrCat("shard ", shard, " (",
                      Active(shard) == 0 ? options_.hosts[shard]
                                         : options_.standby_hosts[shard],
                      ")");
}

std::function<void(grpc::Status)> ShardTransport::Track(
    int shard, int at, std::function<void(grpc::Status)> done) const {
  if (active_ == nullptr) return done;
  return [this, shard, at, done = std::move(done)](grpc::Status s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      int expected = at;
      active_[shard].compare_exchange_strong(expected, 1 - at);
    } else if (s.ok() && answered_[shard].exchange(at) != at) {
      std::fprintf(stderr, "worker: shard %d failed over to %s\n", shard,
                   (at == 0 ? options_.hosts : options_.standby_hosts)[shard]
                       .c_str());
    }
    done(std::move(s));
  };
}

absl::Status ShardTransport::Run(const FanOutCalls& calls,
                                 absl::Duration timeout,
                                 bool wait_for_ready) const {
  FanOutOptions o;
  o.timeout = timeout;
  o.wait_for_ready = wait_for_ready;
  o.window = adaptive_ != nullptr ? adaptive_->window()
                                  : options_.max_calls_in_flight_per_connection;
  o.retry = options_.retry;
  return FanOut(calls, o);
}

absl::Status ShardTransport::WaitUntilAnswering(
    absl::Duration connect_timeout, const std::atomic<bool>* stop_requested,
    const std::function<void(const std::string&)>& on_wait) const {
  constexpr absl::Duration kReportEvery = absl::Seconds(3);
  constexpr absl::Duration kPoll = absl::Milliseconds(250);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + connect_timeout;
  absl::Time next_report = start + absl::Seconds(1);
  const int n = num_shards();
  for (int s = 0; s < n; ++s) {
    const std::string where = absl::StrCat("shard ", s, " at ", options_.hosts[s]);
    std::string last_error = "no answer";
    while (true) {
      if (stop_requested != nullptr &&
          stop_requested->load()) {
        return absl::CancelledError(
            absl::StrCat("stopped while waiting for ", where));
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::UnavailableError(absl::StrCat(
            where, " did not answer within ",
            absl::FormatDuration(connect_timeout),
            " (--connect_timeout_s); is it running, at that address? ",
            last_error));
      }
      if (now >= next_report) {
        if (on_wait) {
          on_wait(absl::StrFormat(
              "waiting for %s (%.0f s)", where,
              absl::ToDoubleSeconds(now - start)));
        }
        next_report += kReportEvery;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(
                           std::min(absl::Seconds(1), deadline - now)));
      proto::StatsRequest req;
      proto::StatsResponse resp;
      const int at = Active(s);
      const grpc::Status st = stub(s)->GetStats(&ctx, req, &resp);
      Track(s, at, [](grpc::Status) {})(st);
      if (st.ok()) {
        if (resp.shard_index() != s || resp.num_shards() != n) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the server at ", options_.hosts[s], " is shard ",
              resp.shard_index(), " of ", resp.num_shards(),
              ", but --ps_hosts lists it as shard ", s, " of ", n,
              ": list every server, in the order of their --shard_index"));
        }
        break;
      }
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
          st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                            absl::StrCat("GetStats to ", where, ": ",
                                         st.error_message()));
      }
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
        last_error = st.error_message();
      }
      absl::SleepFor(std::min(kPoll, deadline - absl::Now()));
    }
  }
  return absl::OkStatus();
}

FanOutCalls ShardTransport::PartCalls(const char* what,
                                      absl::Span<const Part> parts,
                                      absl::Span<const int> which) const {
  FanOutCalls calls;
  calls.what = what;
  calls.count = static_cast<int>(which.size());
  calls.peer_of = [this, parts, which](int k) {
    return ShardName(parts[which[k]].shard);
  };
  const int connections = options_.connections_per_shard;
  calls.lane_of = [parts, which, connections](int k) {
    return LaneOf(parts[which[k]], connections);
  };
  return calls;
}

absl::Status ShardTransport::CallEachShard(
    const char* what, const StartCallFn& start,
    const std::function<void(int)>& reset) const {
  FanOutCalls calls;
  calls.what = what;
  calls.count = num_shards();
  calls.peer_of = [this](int s) { return ShardName(s); };
  calls.lane_of = [](int s) { return s; };
  calls.start = [this, &start](int s, grpc::ClientContext* ctx, auto done) {
    start(s, ctx, Track(s, Active(s), std::move(done)));
  };
  calls.reset = reset;
  return Run(calls, options_.rpc_timeout, /*wait_for_ready=*/false);
}

absl::Status ShardTransport::LeaveEach(int32_t worker_id,
                                       uint64_t incarnation) const {
  proto::PushRequest req;
  req.set_worker_id(worker_id);
  req.set_leave(true);
  req.set_incarnation(incarnation);
  std::vector<proto::PushResponse> resp(num_shards());
  return CallEachShard(
      "Leave",
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stub(s)->async()->Push(ctx, &req, &resp[s], std::move(done));
      },
      [&](int s) { resp[s].Clear(); });
}

absl::StatusOr<std::vector<ShardStats>> ShardTransport::StatsOfEach() const {
  proto::StatsRequest req;
  std::vector<proto::StatsResponse> resp(num_shards());
  DP_RETURN_IF_ERROR(CallEachShard(
      "GetStats",
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stub(s)->async()->GetStats(ctx, &req, &resp[s], std::move(done));
      },
      [&](int s) { resp[s].Clear(); }));
  std::vector<ShardStats> out;
  for (const auto& r : resp) out.push_back(StatsFromProto(r));
  return out;
}

absl::Status ShardTransport::CallParts(
    const char* what, const char* method, absl::Span<const Part> parts,
    absl::Span<const int> which, const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, const OnReply& on_ok) const {
  return CallPartsWith(
      what, [method](int) { return method; }, parts, which, req, resp, on_ok);
}

absl::Status ShardTransport::CallParts(
    const char* what, absl::Span<const char* const> methods,
    absl::Span<const Part> parts, absl::Span<const int> which,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, const OnReply& on_ok) const {
  return CallPartsWith(
      what, [methods](int i) { return methods[i]; }, parts, which, req, resp,
      on_ok);
}

absl::Status ShardTransport::CallPartsWith(
    const char* what, const std::function<const char*(int)>& method_of,
    absl::Span<const Part> parts, absl::Span<const int> which,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, const OnReply& on_ok) const {
  FanOutCalls calls = PartCalls(what, parts, which);
  calls.start = [&](int k, grpc::ClientContext* ctx, auto done) {
    const int i = which[k];
    const Part& p = parts[i];
    const int at = Active(p.shard);
    const char* method = method_of(i);
    std::function<void(grpc::Status)> tracked =
        Track(p.shard, at, std::move(done));
    // Pushes to a shard that serves calls through the shared region leave
    // gRPC out (at its primary address: a shard with a standby has none).
    if (calls_ != nullptr && at == 0) {
      const bool push = std::strcmp(method, kPushMethod) == 0;
      if ((push || std::strcmp(method, kPushPullMethod) == 0) &&
          calls_->Start(p.shard, push ? CallMethod::kPush : CallMethod::kPushPull,
                        req[i], &(*resp)[i], absl::FromChrono(ctx->deadline()),
                        &tracked)) {
        return;
      }
    }
    generic_[at][p.shard][p.conn]->UnaryCall(ctx, method, grpc::StubOptions(),
                                             &req[i], &(*resp)[i],
                                             std::move(tracked));
  };
  calls.reset = [&](int k) { (*resp)[which[k]].Clear(); };
  if (on_ok) calls.on_ok = [&](int k) { return on_ok(which[k]); };
  return Run(calls, options_.rpc_timeout, /*wait_for_ready=*/false);
}

absl::Status ShardTransport::CallAllParts(
    const char* what, const char* method, absl::Span<const Part> parts,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, const OnReply& on_ok) {
  const absl::Time start = absl::Now();
  std::atomic<int64_t> bytes{0};
  for (const grpc::ByteBuffer& r : req) bytes += static_cast<int64_t>(r.Length());
  const OnReply count_reply = [&](int i) {
    bytes += static_cast<int64_t>((*resp)[i].Length());
    return on_ok ? on_ok(i) : absl::OkStatus();
  };
  std::vector<int> all(parts.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  absl::Status s = CallParts(what, method, parts, all, req, resp, count_reply);
  if (s.ok() && adaptive_ != nullptr) {
    adaptive_->OnRound(bytes.load(), absl::Now() - start);
  }
  return s;
}

}  // namespace downpour
