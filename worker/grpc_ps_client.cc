#include "worker/grpc_ps_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/incarnation.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"
#include "rpc/wire.h"
#include "worker/adaptive_window.h"
#include "worker/call_window.h"
#include "worker/chunk_io.h"

namespace downpour {
namespace {

bool IsTransient(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// A group of one shard's chunks moved by one call.
struct Part {
  int shard = 0;
  int conn = 0;    // Which of the shard's connections carries it.
  int index = 0;   // Part number within the shard.
  int count = 1;   // Parts of the shard.
  std::vector<int32_t> chunk_ids;
};

// Groups each shard's chunks, in order, into parts of at most part_bytes
// (a larger chunk alone); a shard without chunks gets one empty part, so
// that it still sees every push and pull.
std::vector<Part> MakeParts(const ShardMap& map, int64_t part_bytes,
                            int connections) {
  std::vector<Part> parts;
  for (int s = 0; s < static_cast<int>(map.shard_chunks.size()); ++s) {
    const size_t first = parts.size();
    Part cur;
    cur.shard = s;
    int64_t bytes = 0;
    for (int32_t id : map.shard_chunks[s]) {
      const int64_t b = map.chunks[id].num_elements * 4;
      if (!cur.chunk_ids.empty() && bytes + b > part_bytes) {
        parts.push_back(cur);
        cur.chunk_ids.clear();
        bytes = 0;
      }
      cur.chunk_ids.push_back(id);
      bytes += b;
    }
    parts.push_back(cur);
    const int count = static_cast<int>(parts.size() - first);
    for (int i = 0; i < count; ++i) {
      parts[first + i].index = i;
      parts[first + i].count = count;
      parts[first + i].conn = i % connections;
    }
  }
  return parts;
}

template <typename Message>
grpc::ByteBuffer Serialized(const Message& msg) {
  grpc::ByteBuffer out;
  bool own = false;
  grpc::SerializationTraits<Message>::Serialize(msg, &out, &own);
  return out;
}

int ConnectionsPerShard(const GrpcClientOptions& o) {
  if (o.connections_per_shard > 0) return o.connections_per_shard;
  return o.hosts.size() == 1 ? 2 : 1;
}

class GrpcParameterClient final : public ParameterClient {
 public:
  // `security` is o.security's, its hosts checked by CheckTargetIsSafe.
  GrpcParameterClient(const GrpcClientOptions& o, const ClientSecurity& security)
      : options_(o), connections_(ConnectionsPerShard(o)),
        // Across machines: -1 sizes the window from measured throughput.
        adaptive_(o.max_calls_in_flight_per_connection < 0
                      ? std::make_unique<AdaptiveWindow>(AdaptiveWindowOptions())
                      : nullptr) {
    for (const std::string& host : o.hosts) {
      std::vector<std::unique_ptr<grpc::GenericStub>> conns;
      for (int c = 0; c < connections_; ++c) {
        grpc::ChannelArguments args;
        ConfigureChannelArguments(&args);
        // A private subchannel pool and a distinct argument give each
        // channel its own TCP connection.
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        args.SetInt("downpour.connection_index", c);
        std::shared_ptr<grpc::Channel> ch = *CreateChannel(host, security, args);
        if (c == 0) stubs_.push_back(proto::ParameterServer::NewStub(ch));
        conns.push_back(std::make_unique<grpc::GenericStub>(ch));
      }
      generic_.push_back(std::move(conns));
    }
    absl::MutexLock l(&inc_mu_);
    shard_incarnation_.assign(o.hosts.size(), 0);
    retired_.resize(o.hosts.size());
  }

  absl::Status Declare(const ModelLayout& layout,
                       absl::Span<const float> initial) override;
  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options) override;
  absl::Status Leave() override;
  absl::Status Push(int64_t seq, absl::Span<const float> grads,
                    absl::Span<const int64_t> base_versions) override;
  absl::Status PushPull(int64_t seq, absl::Span<const float> grads,
                        absl::Span<const int64_t> base_versions,
                        absl::Span<float> params, std::vector<int64_t>* versions,
                        const PullOptions& options) override;
  absl::StatusOr<std::vector<ShardStats>> Stats() override;
  const ShardMap& shard_map() const override { return map_; }

 private:
  // Starts call i with `ctx`; `done` must be called once with its status.
  using StartFn = std::function<void(int i, grpc::ClientContext* ctx,
                                     std::function<void(grpc::Status)> done)>;
  // Runs n calls (call i goes to shard shard_of(i), on connection
  // lane_of(i), with at most max_calls_in_flight_per_connection in flight
  // per connection) and waits. Calls failing transiently are started again,
  // up to max_attempts; before a retry `reset(i)` clears call i's response.
  // When a call succeeds, `on_ok(i)` runs on the completing gRPC thread (so
  // responses are consumed while other calls are in flight); its error
  // fails the whole run, and calls not started by then never are.
  absl::Status CallAll(const char* what, int n,
                       const std::function<int(int)>& shard_of,
                       const std::function<int(int)>& lane_of,
                       absl::Duration timeout, bool wait_for_ready,
                       const StartFn& start,
                       const std::function<void(int)>& reset,
                       const std::function<absl::Status(int)>& on_ok);
  absl::Status CallEachShard(const char* what, absl::Duration timeout,
                             bool wait_for_ready, const StartFn& start,
                             const std::function<void(int)>& reset) {
    return CallAll(what, static_cast<int>(stubs_.size()),
                   [](int i) { return i; }, [](int i) { return i; }, timeout, wait_for_ready, start,
                   reset, nullptr);
  }
  // One request per part of parts_.
  std::vector<grpc::ByteBuffer> PullRequests(const PullOptions& options) const;
  // Also fills push_heads_/push_payloads_, which the requests point into.
  // push_pull: PushPull requests (with the pull encoding).
  std::vector<grpc::ByteBuffer> PushRequests(
      int64_t seq, absl::Span<const float> grads,
      absl::Span<const int64_t> base_versions, bool push_pull);
  absl::Status CheckPush(absl::Span<const float> grads,
                         absl::Span<const int64_t> base_versions) const;
  // Sends req[i] as call `method` on part i's connection (resp[i] gets the
  // reply) for every part; see CallAll.
  absl::Status CallParts(const char* what, const char* method,
                         const std::vector<grpc::ByteBuffer>& req,
                         std::vector<grpc::ByteBuffer>* resp,
                         const std::function<absl::Status(int)>& on_ok);
  // Resets *versions; returns CallParts' on_ok for replies that carry
  // values (PullResponse): reads part i's into params/versions (and its
  // server incarnation into (*part_inc)[i] when part_inc is set), then
  // frees it.
  std::function<absl::Status(int)> ReadValues(
      absl::Span<float> params, std::vector<int64_t>* versions,
      std::vector<grpc::ByteBuffer>* resp,
      std::vector<uint64_t>* part_inc = nullptr);
  // Reads one part's PullResponse into params/versions; *incarnation gets
  // the reply's server incarnation.
  absl::Status ReadPulledPart(const Part& part, const grpc::ByteBuffer& resp,
                              absl::Span<float> params,
                              std::vector<int64_t>* versions, wire::Store store,
                              uint64_t* incarnation);

  // Recovery: a reply of shard `shard` came from server incarnation `inc`
  // (0: an old server, ignored). A new one after another means the shard
  // restarted: logged once and counted. Any thread.
  void SawIncarnation(int shard, uint64_t inc) ABSL_LOCKS_EXCLUDED(inc_mu_);
  // Recovery: after a push call (req/resp per part, part_inc[i] the server
  // incarnation that acknowledged part i), sends again, with the same
  // (seq, part), the parts that a shard's previous process acknowledged
  // when a later part of the same push reached its new process: the old
  // process's copy died with it (unless its snapshot holds it, in which case
  // the new one takes the part as a duplicate), and in sync mode a gradient
  // missing parts is dropped. on_ok(i) consumes part i's reply.
  absl::Status ResendToRestartedShards(
      const char* what, const char* method, int64_t seq,
      const std::vector<grpc::ByteBuffer>& req,
      std::vector<grpc::ByteBuffer>* resp, std::vector<uint64_t>* part_inc,
      const std::function<absl::Status(int)>& on_ok);

  int LaneOf(const Part& p) const {
    return p.shard * connections_ + p.conn;
  }

  const GrpcClientOptions options_;
  const int connections_;  // Per shard, with 0 ("auto") resolved.
  // Null unless max_calls_in_flight_per_connection is -1 (adaptive).
  const std::unique_ptr<AdaptiveWindow> adaptive_;
  int Window() const {
    return adaptive_ != nullptr ? adaptive_->window()
                                : options_.max_calls_in_flight_per_connection;
  }
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> generic_;
  ShardMap map_;
  std::vector<Part> parts_;
  // Push buffers reused across pushes: chunk headers and encoded payloads.
  std::vector<std::string> push_heads_;
  std::vector<std::string> push_payloads_;
  // Recovery: each shard's server incarnation as last seen (0: no reply
  // yet), the incarnations it replaced (a late reply of one is not a
  // restart), and the restarts noticed.
  absl::Mutex inc_mu_;
  std::vector<uint64_t> shard_incarnation_ ABSL_GUARDED_BY(inc_mu_);
  std::vector<std::vector<uint64_t>> retired_ ABSL_GUARDED_BY(inc_mu_);
  int64_t restarts_seen_ ABSL_GUARDED_BY(inc_mu_) = 0;
};

absl::Status GrpcParameterClient::CallAll(
    const char* what, int n, const std::function<int(int)>& shard_of,
    const std::function<int(int)>& lane_of, absl::Duration timeout,
    bool wait_for_ready, const StartFn& start,
    const std::function<void(int)>& reset,
    const std::function<absl::Status(int)>& on_ok) {
  std::vector<int> pending(n);
  for (int i = 0; i < n; ++i) pending[i] = i;
  std::vector<grpc::Status> status(n);
  absl::Mutex mu;
  absl::Status consume_error;
  // Set once a reply could not be consumed: the run fails, so queued calls
  // are not started (a push would be applied for nothing).
  std::atomic<bool> failed{false};
  absl::Time first_failure = absl::InfiniteFuture();
  for (int attempt = 1; !pending.empty(); ++attempt) {
    std::vector<std::unique_ptr<grpc::ClientContext>> ctx(n);
    const std::vector<int> skipped = RunWindowed(
        pending, lane_of, Window(), &failed,
        [&](int i, WindowSlot slot) {
          ctx[i] = std::make_unique<grpc::ClientContext>();
          ctx[i]->set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoSeconds(timeout));
          ctx[i]->set_wait_for_ready(wait_for_ready);
          if (attempt > 1) reset(i);
          start(i, ctx[i].get(), [&, i, slot](grpc::Status s) {
            // The connection's next call goes out while this reply is read.
            slot.Release();
            if (s.ok() && on_ok) {
              absl::Status c = on_ok(i);
              if (!c.ok()) {
                absl::MutexLock l(&mu);
                if (consume_error.ok()) consume_error = c;
                failed = true;
              }
            }
            status[i] = std::move(s);
            slot.Done();
          });
        });
    DP_RETURN_IF_ERROR(consume_error);
    for (int i : skipped) {
      status[i] = grpc::Status(grpc::StatusCode::CANCELLED, "not started");
    }
    std::vector<int> retry;
    const absl::Time now = absl::Now();
    for (int i : pending) {
      if (status[i].ok()) continue;
      first_failure = std::min(first_failure, now);
      // Recovery: a shard being restarted is retried up to reconnect_timeout.
      const bool again = attempt < options_.max_attempts ||
                         now - first_failure < options_.reconnect_timeout;
      // Hostile input (issue 16): a server past its gRPC memory quota resets
      // calls with RESOURCE_EXHAUSTED; retried like an outage, but only
      // max_attempts times (an oversize message is refused that way too).
      const bool overloaded =
          status[i].error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          attempt < options_.max_attempts;
      if ((IsTransient(status[i]) && again) || overloaded) {
        retry.push_back(i);
        continue;
      }
      const int shard = shard_of(i);
      return FromGrpcStatus(
          status[i],
          absl::StrCat(what, " to shard ", shard, " (", options_.hosts[shard],
                       ")", attempt > 1 ? absl::StrCat(" after ", attempt,
                                                       " attempts")
                                        : ""));
    }
    if (!retry.empty()) {
      absl::SleepFor(std::min(absl::Milliseconds(100) * (1 << std::min(attempt, 5)),
                              absl::Seconds(2)));
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
  // The layout proto itself travels in every part; leave room for it.
  proto::ModelLayout layout_proto;
  LayoutToProto(layout, &layout_proto);
  for (const Chunk& c : map.chunks) {
    if (c.num_elements * 4 + layout_proto.ByteSizeLong() + 4096 >
        static_cast<size_t>(kMaxMessageBytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "chunk ", c.id, " of tensor '", layout.tensors[c.tensor_index].name,
          "' has ", c.num_elements * 4, " bytes, over the ", kMaxMessageBytes,
          "-byte message limit: use a smaller max_chunk_bytes"));
    }
  }
  std::vector<Part> parts =
      MakeParts(map, options_.part_bytes, connections_);
  const int n = static_cast<int>(parts.size());
  std::vector<proto::DeclareModelRequest> req(n);
  std::vector<proto::DeclareModelResponse> resp(n);
  for (int i = 0; i < n; ++i) {
    *req[i].mutable_layout() = layout_proto;
    req[i].set_worker_id(options_.worker_id);
    for (int32_t id : parts[i].chunk_ids) {
      const Chunk& c = map.chunks[id];
      proto::ChunkValues* v = req[i].add_initial();
      v->set_chunk_id(id);
      v->mutable_data()->assign(
          reinterpret_cast<const char*>(initial.data() + c.flat_offset),
          c.num_elements * sizeof(float));
    }
  }
  DP_RETURN_IF_ERROR(CallAll(
      "DeclareModel", n, [&](int i) { return parts[i].shard; },
      [&](int i) { return LaneOf(parts[i]); },
      options_.connect_timeout, /*wait_for_ready=*/true,
      [&](int i, grpc::ClientContext* ctx, auto done) {
        stubs_[parts[i].shard]->async()->DeclareModel(ctx, &req[i], &resp[i],
                                                      done);
      },
      [&](int i) { resp[i].Clear(); }, nullptr));
  for (int i = 0; i < n; ++i) {
    if (resp[i].shard_index() != parts[i].shard) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", options_.hosts[parts[i].shard], " is shard ",
          resp[i].shard_index(), " but was listed as shard ", parts[i].shard,
          " in --ps_hosts"));
    }
    SawIncarnation(parts[i].shard, resp[i].server_incarnation());
  }
  map_ = std::move(map);
  parts_ = std::move(parts);
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::ReadPulledPart(
    const Part& part, const grpc::ByteBuffer& resp, absl::Span<float> params,
    std::vector<int64_t>* versions, wire::Store store, uint64_t* incarnation) {
  std::vector<grpc::Slice> slices;
  if (!resp.Dump(&slices).ok()) {
    return absl::InternalError("pull: cannot read the response");
  }
  wire::Pieces pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  absl::StatusOr<std::vector<wire::WireChunk>> chunks =
      wire::ParsePullResponse(pieces, incarnation);
  if (!chunks.ok()) {
    return absl::InternalError(absl::StrCat("shard ", part.shard, ": ",
                                            chunks.status().message()));
  }
  if (chunks->size() != part.chunk_ids.size()) {
    return absl::InternalError(absl::StrCat(
        "shard ", part.shard, " returned ", chunks->size(), " chunks, expected ",
        part.chunk_ids.size()));
  }
  std::string scratch;
  for (const wire::WireChunk& c : *chunks) {
    if (c.chunk_id < 0 || c.chunk_id >= static_cast<int32_t>(map_.chunks.size()) ||
        map_.chunks[c.chunk_id].shard != part.shard) {
      return absl::InternalError(absl::StrCat(
          "shard ", part.shard, " returned chunk ", c.chunk_id,
          " that it does not own"));
    }
    const Chunk& info = map_.chunks[c.chunk_id];
    absl::Status s = wire::DecodeInto(pieces, c, params.data() + info.flat_offset,
                                      info.num_elements, &scratch, store);
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat("shard ", part.shard, ": ", s.message()));
    }
    (*versions)[c.chunk_id] = c.version;
  }
  return absl::OkStatus();
}

std::vector<grpc::ByteBuffer> GrpcParameterClient::PullRequests(
    const PullOptions& options) const {
  std::vector<grpc::ByteBuffer> req(parts_.size());
  for (size_t i = 0; i < parts_.size(); ++i) {
    proto::PullRequest r;
    r.set_worker_id(options_.worker_id);
    r.set_min_version(options.min_version);
    r.set_worker_clock(options.worker_clock);
    r.set_encoding(static_cast<proto::Encoding>(options_.pull_encoding));
    for (int32_t id : parts_[i].chunk_ids) r.add_chunk_ids(id);
    req[i] = Serialized(r);
  }
  return req;
}

absl::Status GrpcParameterClient::CallParts(
    const char* what, const char* method,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp,
    const std::function<absl::Status(int)>& on_ok) {
  // Across machines: bytes both ways and time feed the adaptive window.
  const absl::Time start = absl::Now();
  std::atomic<int64_t> bytes{0};
  for (const grpc::ByteBuffer& r : req) bytes += static_cast<int64_t>(r.Length());
  const std::function<absl::Status(int)> count_reply = [&](int i) {
    bytes += static_cast<int64_t>((*resp)[i].Length());
    return on_ok ? on_ok(i) : absl::OkStatus();
  };
  absl::Status s = CallAll(
      what, static_cast<int>(parts_.size()),
      [&](int i) { return parts_[i].shard; },
      [&](int i) { return LaneOf(parts_[i]); }, options_.rpc_timeout,
      /*wait_for_ready=*/false,
      [&](int i, grpc::ClientContext* ctx, auto done) {
        const Part& p = parts_[i];
        generic_[p.shard][p.conn]->UnaryCall(ctx, method, grpc::StubOptions(),
                                             &req[i], &(*resp)[i], done);
      },
      [&](int i) { (*resp)[i].Clear(); }, count_reply);
  if (s.ok() && adaptive_ != nullptr) {
    adaptive_->OnRound(bytes.load(), absl::Now() - start);
  }
  return s;
}

std::function<absl::Status(int)> GrpcParameterClient::ReadValues(
    absl::Span<float> params, std::vector<int64_t>* versions,
    std::vector<grpc::ByteBuffer>* resp, std::vector<uint64_t>* part_inc) {
  versions->assign(map_.chunks.size(), -1);
  const wire::Store store = wire::StoreFor(
      static_cast<int64_t>(params.size() * sizeof(float)),
      options_.streaming_pull_min_bytes);
  return [this, params, versions, resp, store, part_inc](int i) {
    uint64_t inc = 0;
    absl::Status s =
        ReadPulledPart(parts_[i], (*resp)[i], params, versions, store, &inc);
    if (s.ok()) {
      SawIncarnation(parts_[i].shard, inc);
      if (part_inc != nullptr) (*part_inc)[i] = inc;
    }
    // Free the received slices now, so that later reads reuse them while
    // they are still in cache.
    (*resp)[i].Clear();
    return s;
  };
}

absl::Status GrpcParameterClient::Pull(absl::Span<float> params,
                                       std::vector<int64_t>* versions,
                                       const PullOptions& options) {
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
  const std::vector<grpc::ByteBuffer> req = PullRequests(options);
  std::vector<grpc::ByteBuffer> resp(parts_.size());
  return CallParts("Pull", kPullMethod, req, &resp,
                   ReadValues(params, versions, &resp));
}

std::vector<grpc::ByteBuffer> GrpcParameterClient::PushRequests(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, bool push_pull) {
  const wire::Encoding enc = options_.push_encoding;
  const int n = static_cast<int>(parts_.size());
  push_heads_.resize(n);
  push_payloads_.resize(n);
  std::vector<grpc::ByteBuffer> req(n);
  for (int i = 0; i < n; ++i) {
    const Part& p = parts_[i];
    // All header bytes first (the string must not move once sliced).
    std::string& heads = push_heads_[i];
    heads.clear();
    wire::PushHead head;
    head.worker_id = options_.worker_id;
    head.seq = seq;
    head.part = p.index;
    head.num_parts = p.count;
    if (push_pull) head.pull_encoding = options_.pull_encoding;
    head.incarnation = options_.incarnation;
    wire::AppendPushHead(head, &heads);
    std::vector<size_t> head_end;
    int64_t encoded_total = 0;
    for (int32_t id : p.chunk_ids) {
      const int64_t bytes =
          map_.chunks[id].num_elements * wire::BytesPerValue(enc);
      wire::AppendChunkHeader(wire::kPushGradientsField, id, base_versions[id],
                              enc, bytes, &heads);
      head_end.push_back(heads.size());
      encoded_total += bytes;
    }
    std::string& payload = push_payloads_[i];
    if (enc != wire::Encoding::kRawF32) {
      payload.resize(static_cast<size_t>(encoded_total));
    }
    std::vector<grpc::Slice> slices;
    slices.reserve(2 * p.chunk_ids.size() + 1);
    size_t head_start = 0;
    int64_t payload_at = 0;
    for (size_t k = 0; k < p.chunk_ids.size(); ++k) {
      // Varint fields of the message go out with the first chunk header.
      slices.emplace_back(heads.data() + head_start, head_end[k] - head_start,
                          grpc::Slice::STATIC_SLICE);
      head_start = head_end[k];
      const Chunk& c = map_.chunks[p.chunk_ids[k]];
      const float* src = grads.data() + c.flat_offset;
      if (c.num_elements == 0) continue;
      if (enc == wire::Encoding::kRawF32) {
        slices.emplace_back(src, static_cast<size_t>(c.num_elements) * 4,
                            grpc::Slice::STATIC_SLICE);
      } else {
        char* dst = payload.data() + payload_at;
        const int64_t bytes = c.num_elements * wire::BytesPerValue(enc);
        wire::EncodeValues(enc, src, c.num_elements, dst);
        slices.emplace_back(dst, static_cast<size_t>(bytes),
                            grpc::Slice::STATIC_SLICE);
        payload_at += bytes;
      }
    }
    if (p.chunk_ids.empty()) {
      slices.emplace_back(heads.data(), heads.size(), grpc::Slice::STATIC_SLICE);
    }
    req[i] = grpc::ByteBuffer(slices.data(), slices.size());
  }
  return req;
}

absl::Status GrpcParameterClient::CheckPush(
    absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions) const {
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, grads.size(), "Push"));
  if (base_versions.size() != map_.chunks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Push: ", base_versions.size(), " base versions for ",
        map_.chunks.size(), " chunks"));
  }
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::Push(int64_t seq,
                                       absl::Span<const float> grads,
                                       absl::Span<const int64_t> base_versions) {
  DP_RETURN_IF_ERROR(CheckPush(grads, base_versions));
  const std::vector<grpc::ByteBuffer> req =
      PushRequests(seq, grads, base_versions, /*push_pull=*/false);
  std::vector<grpc::ByteBuffer> resp(parts_.size());
  std::vector<uint64_t> part_inc(parts_.size(), 0);
  // A PushResponse is small: parsed for its server incarnation (an
  // unreadable one is not an error: the push was acknowledged).
  const std::function<absl::Status(int)> on_ok = [&](int i) {
    proto::PushResponse r;
    grpc::ByteBuffer copy((resp)[i]);  // Deserialize consumes it.
    if (grpc::SerializationTraits<proto::PushResponse>::Deserialize(&copy, &r)
            .ok()) {
      SawIncarnation(parts_[i].shard, r.server_incarnation());
      part_inc[i] = r.server_incarnation();
    }
    return absl::OkStatus();
  };
  DP_RETURN_IF_ERROR(CallParts("Push", kPushMethod, req, &resp, on_ok));
  return ResendToRestartedShards("Push", kPushMethod, seq, req, &resp,
                                 &part_inc, on_ok);
}

absl::Status GrpcParameterClient::ResendToRestartedShards(
    const char* what, const char* method, int64_t seq,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, std::vector<uint64_t>* part_inc,
    const std::function<absl::Status(int)>& on_ok) {
  // A shard restarting again meanwhile starts another round; a few suffice.
  for (int round = 0; round < 3; ++round) {
    std::vector<int> stale;
    {
      absl::MutexLock l(&inc_mu_);
      for (size_t i = 0; i < parts_.size(); ++i) {
        const uint64_t inc = (*part_inc)[i];
        if (inc != 0 && inc != shard_incarnation_[parts_[i].shard]) {
          stale.push_back(static_cast<int>(i));
        }
      }
    }
    if (stale.empty()) return absl::OkStatus();
    std::fprintf(stderr,
                 "worker %d: %zu part(s) of push %lld reached a shard's "
                 "previous process before it restarted; sending them again\n",
                 options_.worker_id, stale.size(), static_cast<long long>(seq));
    DP_RETURN_IF_ERROR(CallAll(
        what, static_cast<int>(stale.size()),
        [&](int k) { return parts_[stale[k]].shard; },
        [&](int k) { return LaneOf(parts_[stale[k]]); }, options_.rpc_timeout,
        /*wait_for_ready=*/false,
        [&](int k, grpc::ClientContext* ctx, auto done) {
          const Part& p = parts_[stale[k]];
          generic_[p.shard][p.conn]->UnaryCall(ctx, method, grpc::StubOptions(),
                                               &req[stale[k]],
                                               &(*resp)[stale[k]], done);
        },
        [&](int k) { (*resp)[stale[k]].Clear(); },
        [&](int k) { return on_ok(stale[k]); }));
  }
  return absl::OkStatus();
}

void GrpcParameterClient::SawIncarnation(int shard, uint64_t inc) {
  if (inc == 0) return;  // An old server.
  absl::MutexLock l(&inc_mu_);
  uint64_t& known = shard_incarnation_[shard];
  if (known == inc) return;
  std::vector<uint64_t>& retired = retired_[shard];
  if (std::find(retired.begin(), retired.end(), inc) != retired.end()) {
    return;  // A late reply of a process already replaced.
  }
  if (known != 0) {
    retired.push_back(known);
    ++restarts_seen_;
    // Pulls always read every chunk afresh (no version or delta is kept
    // from the old process), so the next pull brings the restored values.
    std::fprintf(stderr,
                 "worker %d: shard %d restarted (incarnation %016llx -> "
                 "%016llx); re-pulling its parameters (%lld shard restart%s "
                 "seen)\n",
                 options_.worker_id, shard, static_cast<unsigned long long>(known),
                 static_cast<unsigned long long>(inc),
                 static_cast<long long>(restarts_seen_),
                 restarts_seen_ == 1 ? "" : "s");
  }
  known = inc;
}

absl::Status GrpcParameterClient::PushPull(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, absl::Span<float> params,
    std::vector<int64_t>* versions, const PullOptions& options) {
  if (options.min_version > 0 || options.worker_clock > 0) {
    // A pull that may wait for other workers must not hold up this
    // worker's remaining pushes: push everything first.
    DP_RETURN_IF_ERROR(Push(seq, grads, base_versions));
    return Pull(params, versions, options);
  }
  DP_RETURN_IF_ERROR(CheckPush(grads, base_versions));
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
  if (grads.data() < params.data() + params.size() &&
      params.data() < grads.data() + grads.size()) {
    return absl::InvalidArgumentError("PushPull: grads and params overlap");
  }
  // Each part's reply carries its values right after its push.
  const std::vector<grpc::ByteBuffer> req =
      PushRequests(seq, grads, base_versions, /*push_pull=*/true);
  std::vector<grpc::ByteBuffer> resp(parts_.size());
  std::vector<uint64_t> part_inc(parts_.size(), 0);
  const std::function<absl::Status(int)> on_ok =
      ReadValues(params, versions, &resp, &part_inc);
  DP_RETURN_IF_ERROR(
      CallParts("PushPull", kPushPullMethod, req, &resp, on_ok));
  // The parts sent again bring the new process's values.
  return ResendToRestartedShards("PushPull", kPushPullMethod, seq, req, &resp,
                                 &part_inc, on_ok);
}

absl::Status GrpcParameterClient::Leave() {
  const int n = static_cast<int>(stubs_.size());
  proto::PushRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_leave(true);
  req.set_incarnation(options_.incarnation);
  std::vector<proto::PushResponse> resp(n);
  return CallEachShard(
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
  DP_RETURN_IF_ERROR(CallEachShard(
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
  if (options.part_bytes < 4096 ||
      options.part_bytes > kMaxMessageBytes / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "part_bytes must be in [4096, ", kMaxMessageBytes / 2, "], got ",
        options.part_bytes));
  }
  if (options.max_calls_in_flight_per_connection < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_calls_in_flight_per_connection must be >= -1 (0: no limit, -1: "
        "sized from measured throughput), got ",
        options.max_calls_in_flight_per_connection));
  }
  if (options.connections_per_shard < 0 || options.connections_per_shard > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connections_per_shard must be in [0, 64] (0: auto), got ",
        options.connections_per_shard));
  }
  DP_ASSIGN_OR_RETURN(ClientSecurity security,
                      BuildClientSecurity(options.security));
  for (const std::string& host : options.hosts) {
    DP_RETURN_IF_ERROR(
        CheckTargetIsSafe(host, security.tls, security.allow_insecure));
  }
  GrpcClientOptions with_incarnation = options;
  if (with_incarnation.incarnation == 0) {
    with_incarnation.incarnation = NewIncarnation();
  }
  return std::unique_ptr<ParameterClient>(
      new GrpcParameterClient(with_incarnation, security));
}

}  // namespace downpour
