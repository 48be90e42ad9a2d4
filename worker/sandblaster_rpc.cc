#include "worker/sandblaster_rpc.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/sandblaster.grpc.pb.h"
#include "rpc/auth_token.h"
#include "rpc/grpc_config.h"
#include "rpc/peer_identity.h"
#include "rpc/rpc_convert.h"
#include "rpc/server_auth.h"

namespace downpour {

struct SandblasterShards::Stubs {
  std::vector<std::string> hosts;
  std::vector<std::unique_ptr<proto::SandblasterShard::Stub>> stubs;
};

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(timeout));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(
    const std::string& host, const TransportSecurityOptions& security) {
  DP_ASSIGN_OR_RETURN(ClientSecurity client_security,
                      BuildClientSecurity(security));
  grpc::ChannelArguments args;
  ConfigureChannelArguments(&args);
  return CreateChannel(host, client_security, args);
}

void ToProto(const VecRef& v, proto::VecRef* out) {
  out->set_kind(static_cast<int32_t>(v.kind));
  out->set_slot(v.slot);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SandblasterShards>> SandblasterShards::Create(
    const std::vector<std::string>& ps_hosts,
    const TransportSecurityOptions& security, absl::Duration rpc_timeout) {
  if (ps_hosts.empty()) return absl::InvalidArgumentError("no servers");
  auto stubs = std::make_unique<Stubs>();
  stubs->hosts = ps_hosts;
  for (const std::string& host : ps_hosts) {
    DP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                        Channel(host, security));
    stubs->stubs.push_back(proto::SandblasterShard::NewStub(channel));
  }
  return std::unique_ptr<SandblasterShards>(
      new SandblasterShards(std::move(stubs), rpc_timeout));
}

SandblasterShards::SandblasterShards(std::unique_ptr<Stubs> stubs,
                                     absl::Duration timeout)
    : stubs_(std::move(stubs)), timeout_(timeout) {}

SandblasterShards::~SandblasterShards() = default;

absl::StatusOr<std::vector<double>> SandblasterShards::Run(
    const std::vector<VectorOp>& program) {
  proto::VectorProgram request;
  for (const VectorOp& op : program) {
    proto::VectorOp* p = request.add_ops();
    p->set_kind(static_cast<int32_t>(op.kind));
    ToProto(op.a, p->mutable_a());
    ToProto(op.b, p->mutable_b());
    p->set_alpha(op.alpha);
    p->set_history(op.history);
    p->set_eval(op.eval);
    for (const int32_t w : op.workers) p->add_workers(w);
  }
  // Every shard at once: the program's cost is one round trip.
  const size_t n = stubs_->stubs.size();
  std::vector<grpc::ClientContext> contexts(n);
  std::vector<proto::VectorResult> responses(n);
  std::vector<grpc::Status> statuses(n);
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t s = 0; s < n; ++s) {
    SetDeadline(&contexts[s], timeout_);
    stubs_->stubs[s]->async()->Run(&contexts[s], &request, &responses[s],
                                   [&, s](grpc::Status st) {
                                     statuses[s] = std::move(st);
                                     pending.DecrementCount();
                                   });
  }
  pending.Wait();
  sent_ += static_cast<int64_t>(request.ByteSizeLong() * n);
  for (size_t s = 0; s < n; ++s) {
    received_ += static_cast<int64_t>(responses[s].ByteSizeLong());
  }
  std::vector<double> dots;
  for (size_t s = 0; s < n; ++s) {
    if (!statuses[s].ok()) {
      return FromGrpcStatus(statuses[s],
                            absl::StrCat("sandblaster program on shard ", s,
                                         " (", stubs_->hosts[s], ")"));
    }
    if (s == 0) {
      dots.assign(responses[0].dots().begin(), responses[0].dots().end());
    } else if (responses[s].dots_size() != static_cast<int>(dots.size())) {
      return absl::InternalError("shards answered different numbers of dots");
    } else {
      for (size_t i = 0; i < dots.size(); ++i) dots[i] += responses[s].dots(i);
    }
  }
  return dots;
}

absl::Status SandblasterShards::Accumulate(int64_t eval, int32_t worker,
                                           absl::Span<const float> grad,
                                           const ShardMap& map) {
  for (size_t s = 0; s < stubs_->stubs.size(); ++s) {
    proto::AccumulateRequest request;
    request.set_eval(eval);
    request.set_worker_id(worker);
    if (s < map.shard_chunks.size()) {
      request.mutable_values()->Reserve(
          static_cast<int>(map.shard_elements[s]));
      for (const int32_t id : map.shard_chunks[s]) {
        const Chunk& c = map.chunks[id];
        if (c.flat_offset + c.num_elements > static_cast<int64_t>(grad.size())) {
          return absl::InvalidArgumentError("gradient smaller than the model");
        }
        const float* p = grad.data() + c.flat_offset;
        request.mutable_values()->Add(p, p + c.num_elements);
      }
    }
    grpc::ClientContext context;
    SetDeadline(&context, timeout_);
    proto::AccumulateResponse response;
    DP_RETURN_IF_ERROR(FromGrpcStatus(
        stubs_->stubs[s]->Accumulate(&context, request, &response),
        absl::StrCat("sandblaster gradient push to shard ", s, " (",
                     stubs_->hosts[s], ")")));
  }
  return absl::OkStatus();
}

absl::Status SandblasterShards::SetCoordinator(const std::string& address) {
  for (size_t s = 0; s < stubs_->stubs.size(); ++s) {
    proto::CoordinatorAddress request;
    request.set_address(address);
    grpc::ClientContext context;
    SetDeadline(&context, timeout_);
    proto::SetCoordinatorResponse response;
    DP_RETURN_IF_ERROR(FromGrpcStatus(
        stubs_->stubs[s]->SetCoordinator(&context, request, &response),
        absl::StrCat("registering the coordinator on shard ", s)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SandblasterShards::FindCoordinator(
    absl::Duration timeout, const std::string& stale) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::OkStatus();
  while (true) {
    grpc::ClientContext context;
    SetDeadline(&context, std::min(timeout_, absl::Seconds(5)));
    proto::CoordinatorAddress response;
    last = FromGrpcStatus(
        stubs_->stubs[0]->GetCoordinator(&context, proto::GetCoordinatorRequest(),
                                         &response),
        "asking shard 0 for the coordinator");
    if (last.ok() && !response.address().empty() &&
        response.address() != stale) {
      return response.address();
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat(
      "the chief's Sandblaster coordinator did not register in ",
      absl::FormatDuration(timeout),
      last.ok() ? "" : absl::StrCat(" (", last.message(), ")")));
}

namespace {

class LocalSource final : public WorkSource {
 public:
  explicit LocalSource(PortionTable* table) : table_(table) {}
  absl::StatusOr<WorkOrder> GetWork(const WorkReport& report) override {
    return table_->GetWork(report);
  }

 private:
  PortionTable* const table_;  // Not owned.
};

class RemoteSource final : public WorkSource {
 public:
  RemoteSource(std::string address,
               std::unique_ptr<proto::SandblasterCoordinator::Stub> stub,
               absl::Duration patience)
      : address_(std::move(address)), stub_(std::move(stub)),
        patience_(patience) {}

  absl::StatusOr<WorkOrder> GetWork(const WorkReport& r) override {
    proto::WorkRequest request;
    request.set_worker_id(r.worker);
    request.set_eval(r.eval);
    request.set_portion(r.portion);
    request.set_loss_sum(r.loss_sum);
    request.set_examples(r.examples);
    request.set_pushed_eval(r.pushed_eval);
    request.set_poll(r.poll);
    request.set_incarnation(r.incarnation);
    const absl::Time give_up = absl::Now() + patience_;
    while (true) {
      grpc::ClientContext context;
      SetDeadline(&context, absl::Seconds(5));
      proto::WorkResponse p;
      const grpc::Status st = stub_->GetWork(&context, request, &p);
      if (st.ok()) {
        WorkOrder o;
        o.action = static_cast<WorkAction>(p.action());
        o.eval = p.eval();
        o.portion = p.portion();
        o.first_example = p.first_example();
        o.num_examples = p.num_examples();
        o.accepted = p.accepted();
        o.discard = p.discard();
        o.eval_open = p.eval_open();
        o.message = p.message();
        return o;
      }
      const bool transient = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             st.error_code() ==
                                 grpc::StatusCode::DEADLINE_EXCEEDED;
      if (!transient) {  // Refused (who, or what was reported).
        return FromGrpcStatus(
            st, absl::StrCat("the chief's Sandblaster coordinator at ",
                             address_));
      }
      if (absl::Now() >= give_up) {
        return absl::UnavailableError(absl::StrCat(
            "the chief's Sandblaster coordinator at ", address_,
            " is gone (the chief died or stopped): ", st.error_message()));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

 private:
  const std::string address_;
  std::unique_ptr<proto::SandblasterCoordinator::Stub> stub_;
  const absl::Duration patience_;
};

}  // namespace

std::unique_ptr<WorkSource> LocalWorkSource(PortionTable* table) {
  return std::make_unique<LocalSource>(table);
}

absl::StatusOr<std::unique_ptr<WorkSource>> RemoteWorkSource(
    const std::string& address, const TransportSecurityOptions& security,
    absl::Duration patience) {
  DP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      Channel(address, security));
  return std::unique_ptr<WorkSource>(new RemoteSource(
      address, proto::SandblasterCoordinator::NewStub(channel), patience));
}

class CoordinatorService final
    : public proto::SandblasterCoordinator::CallbackService {
 public:
  CoordinatorService(PortionTable* table, bool require_task_certificates)
      : table_(table), strict_(require_task_certificates) {}

  // The token was checked from the headers (the server's credentials,
  // rpc/server_auth.h); here, who the caller is.
  grpc::ServerUnaryReactor* GetWork(grpc::CallbackServerContext* context,
                                    const proto::WorkRequest* request,
                                    proto::WorkResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const absl::Status who = CheckActsForWorker(
        PeerIdentityOf(*context), request->worker_id(), strict_);
    if (!who.ok()) {
      reactor->Finish(ToGrpcStatus(who));
      return reactor;
    }
    WorkReport r;
    r.worker = request->worker_id();
    r.eval = request->eval();
    r.portion = request->portion();
    r.loss_sum = request->loss_sum();
    r.examples = request->examples();
    r.pushed_eval = request->pushed_eval();
    r.poll = request->poll();
    r.incarnation = request->incarnation();
    const absl::StatusOr<WorkOrder> order = table_->GetWork(r);
    if (!order.ok()) {
      reactor->Finish(ToGrpcStatus(order.status()));
      return reactor;
    }
    const WorkOrder& o = *order;
    response->set_action(static_cast<int32_t>(o.action));
    response->set_eval(o.eval);
    response->set_portion(o.portion);
    response->set_first_example(o.first_example);
    response->set_num_examples(o.num_examples);
    response->set_accepted(o.accepted);
    response->set_discard(o.discard);
    response->set_eval_open(o.eval_open);
    response->set_message(o.message);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  PortionTable* const table_;  // Not owned.
  const bool strict_;          // require_task_certificates
};

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    PortionTable* table, const std::string& listen,
    const TransportSecurityOptions& security) {
  // The chief's cluster-spec address is not loopback: the same rule as
  // every shard's listener.
  DP_RETURN_IF_ERROR(CheckListenAddressIsSafe(listen, security));
  DP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      BuildServerCredentials(security));
  DP_ASSIGN_OR_RETURN(std::unique_ptr<TokenAuthenticator> auth,
                      TokenAuthenticator::Create(security));
  // The token is checked from a call's headers, before its body is read.
  credentials = WithTokenCheck(
      std::move(credentials), security,
      std::shared_ptr<const TokenAuthenticator>(std::move(auth)));
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  server->service_ = std::make_unique<CoordinatorService>(
      table, security.require_task_certificates);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, credentials, &port);
  builder.RegisterService(server->service_.get());
  ConfigureServerBuilder(&builder);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("the coordinator could not listen on ", listen));
  }
  const size_t colon = listen.rfind(':');
  server->address_ = absl::StrCat(listen.substr(0, colon), ":", port);
  return server;
}

CoordinatorServer::~CoordinatorServer() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(500));
    server_->Wait();
  }
}

}  // namespace downpour
