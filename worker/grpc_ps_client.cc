#include "worker/grpc_ps_client.h"

#include <chrono>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/rpc_convert.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/grpc_service.h"
#include "worker/chunk_io.h"

namespace downpour {
namespace {

bool IsTransient(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

class GrpcParameterClient final : public ParameterClient {
 public:
  explicit GrpcParameterClient(const GrpcClientOptions& o) : options_(o) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    for (const std::string& host : o.hosts) {
      stubs_.push_back(proto::ParameterServer::NewStub(grpc::CreateCustomChannel(
          host, grpc::InsecureChannelCredentials(), args)));
    }
  }

  absl::Status Declare(const ModelLayout& layout,
                       absl::Span<const float> initial) override;
  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options) override;
  absl::Status Leave() override;
  absl::Status Push(int64_t seq, absl::Span<const float> grads,
                    absl::Span<const int64_t> base_versions) override;
  absl::StatusOr<std::vector<ShardStats>> Stats() override;
  const ShardMap& shard_map() const override { return map_; }

 private:
  // Runs call(shard, ctx, done) on every shard at once and waits. Shards that
  // fail transiently are tried again, up to max_attempts; `reset(shard)`
  // clears a shard's response before a retry.
  using StartFn = std::function<void(int shard, grpc::ClientContext* ctx,
                                     std::function<void(grpc::Status)> done)>;
  absl::Status CallAllShards(const char* what, absl::Duration timeout,
                             bool wait_for_ready, const StartFn& start,
                             const std::function<void(int)>& reset);

  const GrpcClientOptions options_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  ShardMap map_;
  ModelLayout layout_;
};

absl::Status GrpcParameterClient::CallAllShards(
    const char* what, absl::Duration timeout, bool wait_for_ready,
    const StartFn& start, const std::function<void(int)>& reset) {
  const int n = static_cast<int>(stubs_.size());
  std::vector<int> pending(n);
  for (int i = 0; i < n; ++i) pending[i] = i;
  std::vector<grpc::Status> status(n);
  for (int attempt = 1; !pending.empty(); ++attempt) {
    std::vector<std::unique_ptr<grpc::ClientContext>> ctx(n);
    absl::BlockingCounter counter(static_cast<int>(pending.size()));
    for (int shard : pending) {
      ctx[shard] = std::make_unique<grpc::ClientContext>();
      ctx[shard]->set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoSeconds(timeout));
      ctx[shard]->set_wait_for_ready(wait_for_ready);
      if (attempt > 1) reset(shard);
      start(shard, ctx[shard].get(), [&, shard](grpc::Status s) {
        status[shard] = std::move(s);
        counter.DecrementCount();
      });
    }
    counter.Wait();
    std::vector<int> retry;
    for (int shard : pending) {
      if (status[shard].ok()) continue;
      if (IsTransient(status[shard]) && attempt < options_.max_attempts) {
        retry.push_back(shard);
        continue;
      }
      return FromGrpcStatus(
          status[shard],
          absl::StrCat(what, " to shard ", shard, " (", options_.hosts[shard],
                       ")", attempt > 1 ? absl::StrCat(" after ", attempt,
                                                       " attempts")
                                        : ""));
    }
    if (!retry.empty()) {
      absl::SleepFor(absl::Milliseconds(100) * (1 << std::min(attempt, 5)));
    }
    pending = std::move(retry);
  }
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::Declare(const ModelLayout& layout,
                                          absl::Span<const float> initial) {
  if (layout.num_shards != static_cast<int>(stubs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout is cut for ", layout.num_shards, " shards but ",
        stubs_.size(), " server addresses were given"));
  }
  DP_ASSIGN_OR_RETURN(ShardMap map, ComputeShardMap(layout));
  if (static_cast<int64_t>(initial.size()) != map.total_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values have ", initial.size(), " floats, layout has ",
        map.total_elements));
  }
  const int n = static_cast<int>(stubs_.size());
  std::vector<proto::DeclareModelRequest> req(n);
  std::vector<proto::DeclareModelResponse> resp(n);
  for (int s = 0; s < n; ++s) {
    LayoutToProto(layout, req[s].mutable_layout());
    req[s].set_worker_id(options_.worker_id);
    for (int32_t id : map.shard_chunks[s]) {
      const Chunk& c = map.chunks[id];
      proto::ChunkValues* v = req[s].add_initial();
      v->set_chunk_id(id);
      v->mutable_data()->assign(
          reinterpret_cast<const char*>(initial.data() + c.flat_offset),
          c.num_elements * sizeof(float));
    }
  }
  DP_RETURN_IF_ERROR(CallAllShards(
      "DeclareModel", options_.connect_timeout, /*wait_for_ready=*/true,
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stubs_[s]->async()->DeclareModel(ctx, &req[s], &resp[s], done);
      },
      [&](int s) { resp[s].Clear(); }));
  for (int s = 0; s < n; ++s) {
    if (resp[s].shard_index() != s) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", options_.hosts[s], " is shard ", resp[s].shard_index(),
          " but was listed as shard ", s, " in --ps_hosts"));
    }
  }
  map_ = std::move(map);
  layout_ = layout;
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::Pull(absl::Span<float> params,
                                       std::vector<int64_t>* versions,
                                       const PullOptions& options) {
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
  const int n = static_cast<int>(stubs_.size());
  proto::PullRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_min_version(options.min_version);
  req.set_worker_clock(options.worker_clock);
  std::vector<proto::PullResponse> resp(n);
  DP_RETURN_IF_ERROR(CallAllShards(
      "Pull", options_.rpc_timeout, false,
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stubs_[s]->async()->Pull(ctx, &req, &resp[s], done);
      },
      [&](int s) { resp[s].Clear(); }));
  versions->assign(map_.chunks.size(), -1);
  for (int s = 0; s < n; ++s) {
    if (resp[s].chunks_size() != static_cast<int>(map_.shard_chunks[s].size())) {
      return absl::InternalError(absl::StrCat(
          "shard ", s, " returned ", resp[s].chunks_size(), " chunks, expected ",
          map_.shard_chunks[s].size()));
    }
    for (const proto::ChunkValues& c : resp[s].chunks()) {
      DP_RETURN_IF_ERROR(StoreChunk(map_, s, c.chunk_id(), c.version(),
                                    c.data().data(), c.data().size(), params,
                                    versions));
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::Push(int64_t seq,
                                       absl::Span<const float> grads,
                                       absl::Span<const int64_t> base_versions) {
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, grads.size(), "Push"));
  if (base_versions.size() != map_.chunks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Push: ", base_versions.size(), " base versions for ",
        map_.chunks.size(), " chunks"));
  }
  const int n = static_cast<int>(stubs_.size());
  std::vector<proto::PushRequest> req(n);
  std::vector<proto::PushResponse> resp(n);
  for (int s = 0; s < n; ++s) {
    req[s].set_worker_id(options_.worker_id);
    req[s].set_seq(seq);
    for (int32_t id : map_.shard_chunks[s]) {
      const Chunk& c = map_.chunks[id];
      proto::ChunkGradient* g = req[s].add_gradients();
      g->set_chunk_id(id);
      g->set_base_version(base_versions[id]);
      g->mutable_data()->assign(
          reinterpret_cast<const char*>(grads.data() + c.flat_offset),
          c.num_elements * sizeof(float));
    }
  }
  return CallAllShards(
      "Push", options_.rpc_timeout, false,
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stubs_[s]->async()->Push(ctx, &req[s], &resp[s], done);
      },
      [&](int s) { resp[s].Clear(); });
}

absl::Status GrpcParameterClient::Leave() {
  const int n = static_cast<int>(stubs_.size());
  proto::PushRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_leave(true);
  std::vector<proto::PushResponse> resp(n);
  return CallAllShards(
      "Leave", options_.rpc_timeout, false,
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stubs_[s]->async()->Push(ctx, &req, &resp[s], done);
      },
      [&](int s) { resp[s].Clear(); });
}

absl::StatusOr<std::vector<ShardStats>> GrpcParameterClient::Stats() {
  const int n = static_cast<int>(stubs_.size());
  proto::StatsRequest req;
  std::vector<proto::StatsResponse> resp(n);
  DP_RETURN_IF_ERROR(CallAllShards(
      "GetStats", options_.rpc_timeout, false,
      [&](int s, grpc::ClientContext* ctx, auto done) {
        stubs_[s]->async()->GetStats(ctx, &req, &resp[s], done);
      },
      [&](int s) { resp[s].Clear(); }));
  std::vector<ShardStats> out;
  for (const auto& r : resp) out.push_back(StatsFromProto(r));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterClient>> NewGrpcParameterClient(
    const GrpcClientOptions& options) {
  if (options.hosts.empty()) {
    return absl::InvalidArgumentError("no parameter-server addresses given");
  }
  for (const std::string& h : options.hosts) {
    if (h.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", h, "' is not host:port"));
    }
  }
  if (options.worker_id < 0 || options.max_attempts < 1) {
    return absl::InvalidArgumentError("worker_id must be >= 0, max_attempts >= 1");
  }
  return std::unique_ptr<ParameterClient>(new GrpcParameterClient(options));
}

}  // namespace downpour
