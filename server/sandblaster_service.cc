#include "server/sandblaster_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/sandblaster.grpc.pb.h"
#include "rpc/peer_identity.h"
#include "rpc/rpc_convert.h"
#include "server/lbfgs_shard.h"

namespace downpour {
namespace {

VecRef FromProto(const proto::VecRef& v) {
  return {static_cast<VecKind>(v.kind()), v.slot()};
}

class SandblasterShardService final
    : public proto::SandblasterShard::CallbackService {
 public:
  SandblasterShardService(std::function<ParameterStore*()> store,
                          const TokenAuthenticator* auth,
                          SandblasterShardServiceOptions options)
      : store_(std::move(store)), auth_(auth), options_(options) {}

  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                const proto::VectorProgram* request,
                                proto::VectorResult* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor) || NotChief(*context, reactor)) {
      return reactor;
    }
    std::vector<VectorOp> program;
    for (const proto::VectorOp& p : request->ops()) {
      VectorOp op;
      op.kind = static_cast<VectorOp::Kind>(p.kind());
      op.a = FromProto(p.a());
      op.b = FromProto(p.b());
      op.alpha = p.alpha();
      op.eval = p.eval();
      op.workers.assign(p.workers().begin(), p.workers().end());
      op.history = p.history();
      program.push_back(std::move(op));
    }
    absl::StatusOr<LbfgsShard*> shard = Shard();
    absl::StatusOr<std::vector<double>> dots =
        shard.ok() ? (*shard)->Run(program)
                   : absl::StatusOr<std::vector<double>>(shard.status());
    if (dots.ok()) {
      for (const double d : *dots) response->add_dots(d);
    }
    reactor->Finish(ToGrpcStatus(dots.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* Accumulate(
      grpc::CallbackServerContext* context,
      const proto::AccumulateRequest* request,
      proto::AccumulateResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
    absl::Status s = CheckActsForWorker(PeerIdentityOf(*context),
                                        request->worker_id(),
                                        options_.require_task_certificates);
    absl::StatusOr<LbfgsShard*> shard =
        s.ok() ? Shard() : absl::StatusOr<LbfgsShard*>(s);
    s = shard.status();
    if (s.ok()) {
      s = (*shard)->Accumulate(
          request->eval(), request->worker_id(),
          absl::MakeConstSpan(request->values().data(),
                              request->values().size()));
    }
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  grpc::ServerUnaryReactor* SetCoordinator(
      grpc::CallbackServerContext* context,
      const proto::CoordinatorAddress* request,
      proto::SetCoordinatorResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor) || NotChief(*context, reactor)) {
      return reactor;
    }
    if (request->address().size() > 1024) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "coordinator address too long"));
      return reactor;
    }
    {
      absl::MutexLock l(&mu_);
      coordinator_ = request->address();
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetCoordinator(
      grpc::CallbackServerContext* context,
      const proto::GetCoordinatorRequest* /*request*/,
      proto::CoordinatorAddress* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
    {
      absl::MutexLock l(&mu_);
      response->set_address(coordinator_);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  // Run and SetCoordinator steer every worker: the chief's alone.
  bool NotChief(const grpc::CallbackServerContext& context,
                grpc::ServerUnaryReactor* reactor) const {
    const absl::Status s = CheckActsForWorker(
        PeerIdentityOf(context), 0, options_.require_task_certificates);
    if (s.ok()) return false;
    reactor->Finish(ToGrpcStatus(s));
    return true;
  }

  // The shard's L-BFGS side, made once the model is declared.
  absl::StatusOr<LbfgsShard*> Shard() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (shard_ != nullptr) return shard_.get();
    ParameterStore* const store = store_();
    if (store == nullptr) return absl::UnavailableError("shard not serving yet");
    absl::StatusOr<ShardMap> map = store->shard_map();
    if (!map.ok()) return map.status();
    const int64_t size = store->Stats().num_elements;
    shard_ = std::make_unique<LbfgsShard>(
        size, options_.num_workers,
        [store](absl::Span<float> out) {
          int64_t at = 0;
          absl::Status s = store->Pull({}, [&](const ChunkView& c) {
            if (at + c.num_elements > static_cast<int64_t>(out.size())) return;
            std::copy(c.data, c.data + c.num_elements, out.data() + at);
            at += c.num_elements;
          });
          if (s.ok() && at != static_cast<int64_t>(out.size())) {
            s = absl::InternalError("the store's chunks changed size");
          }
          return s;
        },
        [store](absl::Span<const float> x) { return store->Overwrite(x); });
    return shard_.get();
  }

  const std::function<ParameterStore*()> store_;
  const TokenAuthenticator* const auth_;  // Not owned; null: no token.
  const SandblasterShardServiceOptions options_;
  absl::Mutex mu_;
  std::unique_ptr<LbfgsShard> shard_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<grpc::Service> NewSandblasterShardService(
    std::function<ParameterStore*()> store, const TokenAuthenticator* auth,
    SandblasterShardServiceOptions options) {
  return std::make_unique<SandblasterShardService>(std::move(store), auth,
                                                   options);
}

}  // namespace downpour
