#include "server/grpc_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc_convert.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"

namespace downpour {
namespace {

// Views of a repeated field of wire chunks, pointing into the request.
template <typename RepeatedChunks>
std::vector<ChunkBytes> ViewChunks(const RepeatedChunks& chunks) {
  std::vector<ChunkBytes> out;
  out.reserve(chunks.size());
  for (const auto& c : chunks) {
    ChunkBytes b;
    b.chunk_id = c.chunk_id();
    b.data = c.data().data();
    b.num_bytes = static_cast<int64_t>(c.data().size());
    if constexpr (std::is_same_v<std::decay_t<decltype(c)>,
                                 proto::ChunkGradient>) {
      b.base_version = c.base_version();
    }
    out.push_back(b);
  }
  return out;
}

class ParameterServerService final
    : public proto::ParameterServer::CallbackService {
 public:
  explicit ParameterServerService(ParameterStore* store) : store_(store) {}

  grpc::ServerUnaryReactor* DeclareModel(
      grpc::CallbackServerContext* ctx, const proto::DeclareModelRequest* req,
      proto::DeclareModelResponse* resp) override {
    const std::vector<ChunkBytes> initial = ViewChunks(req->initial());
    absl::StatusOr<bool> fresh =
        store_->Declare(LayoutFromProto(req->layout()), initial);
    if (fresh.ok()) {
      resp->set_initialized_now(*fresh);
      resp->set_shard_index(store_->Stats().shard_index);
    }
    return Finish(ctx, fresh.status());
  }

  // May complete later (sync steps, ssp bound): the reactor is finished from
  // whichever thread makes the pull ready, never by blocking this one.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const proto::PullRequest* req,
                                 proto::PullResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    PullSpec spec;
    spec.chunk_ids.assign(req->chunk_ids().begin(), req->chunk_ids().end());
    spec.min_version = req->min_version();
    spec.worker_clock = req->worker_id() >= 0 && req->worker_clock() > 0
                            ? req->worker_clock()
                            : -1;
    store_->PullWhenReady(
        std::move(spec),
        [resp](const ChunkView& c) {
          proto::ChunkValues* out = resp->add_chunks();
          out->set_chunk_id(c.chunk_id);
          out->set_version(c.version);
          out->mutable_data()->assign(reinterpret_cast<const char*>(c.data),
                                      c.num_elements * sizeof(float));
        },
        [resp, reactor](absl::Status s) {
          if (!s.ok()) resp->Clear();
          reactor->Finish(ToGrpcStatus(s));
        });
    return reactor;
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const proto::PushRequest* req,
                                 proto::PushResponse* resp) override {
    if (req->leave()) {
      return Finish(ctx, req->gradients_size() > 0
                             ? absl::InvalidArgumentError(
                                   "a leave push carries no gradients")
                             : store_->Leave(req->worker_id()));
    }
    const std::vector<ChunkBytes> grads = ViewChunks(req->gradients());
    absl::StatusOr<PushResult> r =
        store_->Push(req->worker_id(), req->seq(), grads);
    if (r.ok()) {
      resp->set_duplicate(r->duplicate);
      resp->set_dropped(r->dropped);
      for (int64_t v : r->versions) resp->add_versions(v);
    }
    return Finish(ctx, r.status());
  }

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const proto::StatsRequest*,
                                     proto::StatsResponse* resp) override {
    StatsToProto(store_->Stats(), resp);
    return Finish(ctx, absl::OkStatus());
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                          const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  ParameterStore* const store_;  // Not owned.
};

}  // namespace

std::unique_ptr<grpc::Service> NewParameterServerService(ParameterStore* store) {
  return std::make_unique<ParameterServerService>(store);
}

}  // namespace downpour
