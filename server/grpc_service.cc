#include "server/grpc_service.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/incarnation.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/grpc_config.h"
#include "rpc/peer_identity.h"
#include "rpc/rpc_convert.h"
#include "rpc/shared_memory.h"
#include "rpc/shared_calls.h"
#include "rpc/wire.h"
#include "server/service_answer.h"
#include "server/shared_call_server.h"
#include "server/shared_payloads.h"

namespace downpour {
namespace {

// Views of a repeated field of wire chunks, pointing into the request.
std::vector<ChunkBytes> ViewChunks(
    const google::protobuf::RepeatedPtrField<proto::ChunkValues>& chunks) {
  std::vector<ChunkBytes> out;
  out.reserve(chunks.size());
  for (const auto& c : chunks) {
    out.push_back(ChunkBytes{c.chunk_id(), 0, c.data().data(),
                             static_cast<int64_t>(c.data().size())});
  }
  return out;
}

wire::Pieces PiecesOf(const std::vector<grpc::Slice>& slices) {
  wire::Pieces p;
  p.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    p.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return p;
}

template <typename Message>
absl::Status ParseSmall(const grpc::ByteBuffer& in, Message* msg) {
  grpc::ByteBuffer copy(in);  // Shares the slices; Deserialize consumes it.
  grpc::Status s = grpc::SerializationTraits<Message>::Deserialize(&copy, msg);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->name(), ": ",
                     s.error_message()));
  }
  return absl::OkStatus();
}

template <typename Message>
void SerializeSmall(const Message& msg, grpc::ByteBuffer* out) {
  bool own = false;
  grpc::SerializationTraits<Message>::Serialize(msg, out, &own);
}

// Each gRPC callback thread keeps one buffer for payloads that must be
// gathered or decoded, reused across requests (no allocation, no page
// faults in the steady state).
std::vector<float>& ThreadScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}


// Where a reply's values go when the request named shared memory.
struct SharedReply {
  std::shared_ptr<MappedRegion> region;
  uint64_t offset = 0;
  SharedPayloads* payloads = nullptr;  // Not owned.
};

// Pull, Push and PushPull are served as raw byte buffers
// (WithRawCallbackMethod_*), so payloads are written from and read into place
// (rpc/wire.h); the small DeclareModel and GetStats are raw too, parsed
// here with protobuf, so that an unreadable request gets INVALID_ARGUMENT
// with a message (the generated handlers answer UNIMPLEMENTED, empty).
using ServiceBase = proto::ParameterServer::WithRawCallbackMethod_Pull<
    proto::ParameterServer::WithRawCallbackMethod_Push<
        proto::ParameterServer::WithRawCallbackMethod_PushPull<
            proto::ParameterServer::WithRawCallbackMethod_DeclareModel<
                proto::ParameterServer::WithRawCallbackMethod_GetStats<
                    proto::ParameterServer::CallbackService>>>>>;

class ParameterServerService final : public ServiceBase {
 public:
  ParameterServerService(ParameterStore* store, const ServiceOptions& options)
      : store_(store), options_(options), shared_(store) {}

  ~ParameterServerService() override { StopSharedCalls(); }

  // No more calls through shared memory: their threads end (the workers go
  // on by gRPC), and answers still pending report to no observer.
  void StopSharedCalls() {
    std::map<const MappedRegion*, std::unique_ptr<SharedCallServer>> servers;
    {
      absl::MutexLock l(&calls_mu_);
      calls_stopped_ = true;
      servers.swap(call_servers_);
    }
    servers.clear();  // Stops and joins their threads.
    reporter_->Clear();
  }

  grpc::ServerUnaryReactor* DeclareModel(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override {
    if (absl::Status s = Admit(*ctx); !s.ok()) return Finish(ctx, s);
    proto::DeclareModelRequest parsed;
    if (absl::Status s = ParseSmall(*request, &parsed); !s.ok()) {
      return Finish(ctx, s);
    }
    proto::DeclareModelResponse reply;
    absl::Status s =
        options_.replica == nullptr
            ? Declare(&parsed, &reply)
            : options_.replica->ReplicateAndApply(
                  ForwardKind::kDeclare, parsed.SerializeAsString(),
                  [&] { return Declare(&parsed, &reply); });
    if (s.ok()) SerializeSmall(reply, response);
    return Finish(ctx, s);
  }

  absl::Status Declare(const proto::DeclareModelRequest* req,
                       proto::DeclareModelResponse* resp) {
    const std::vector<ChunkBytes> initial = ViewChunks(req->initial());
    for (const proto::ChunkValues& c : req->initial()) {
      if (c.encoding() != proto::RAW_F32) {
        return absl::InvalidArgumentError(
            "declare: initial values must be RAW_F32");
      }
    }
    absl::StatusOr<bool> fresh =
        store_->Declare(LayoutFromProto(req->layout()), initial);
    if (fresh.ok()) {
      resp->set_initialized_now(*fresh);
      resp->set_shard_index(store_->Stats().shard_index);
      resp->set_server_incarnation(Incarnation());
      if (options_.observer != nullptr) options_.observer->OnDeclared();
    }
    return fresh.status();
  }

  // May complete later (sync steps, ssp bound): the reactor is finished from
  // whichever thread makes the pull ready, never by blocking this one. The
  // store hands out references to its copy-on-write value buffers, so
  // float32 values go from the store to the socket with no copy.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    if (absl::Status s = Admit(*ctx); !s.ok()) return Finish(ctx, s);
    proto::PullRequest req;
    if (absl::Status s = ParseSmall(*request, &req); !s.ok()) {
      return Finish(ctx, s);
    }
    if (!proto::Encoding_IsValid(req.encoding())) {
      return Finish(ctx, absl::InvalidArgumentError(absl::StrCat(
                             "pull: unknown encoding ", req.encoding())));
    }
    const auto encoding = static_cast<wire::Encoding>(req.encoding());
    PullSpec spec;
    spec.chunk_ids.assign(req.chunk_ids().begin(), req.chunk_ids().end());
    spec.min_version = req.min_version();
    spec.worker_id = req.worker_id();
    // Refused before reading what gRPC could not send.
    spec.max_response_bytes = kMaxMessageBytes;
    spec.value_bytes = wire::BytesPerValue(encoding);
    spec.worker_clock =
        req.worker_id() >= 0 && req.worker_clock() > 0 ? req.worker_clock() : -1;
    std::optional<SharedReply> shared;
    if (req.has_shared()) {
      if (encoding != wire::Encoding::kRawF32) {
        return Finish(ctx, absl::InvalidArgumentError(
                               "pull: shared-memory values are float32 only"));
      }
      absl::StatusOr<std::shared_ptr<MappedRegion>> region =
          shared_.Region(ctx->peer(), SharedRefFromProto(req.shared()),
                         options_.replica != nullptr);
      if (!region.ok()) return Finish(ctx, region.status());
      shared = SharedReply{*std::move(region), req.shared().reply_offset(),
                           &shared_};
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    PullLater(std::move(spec), encoding, GrpcAnswer(ctx, response, reactor),
              std::move(shared));
    return reactor;
  }

  // Answers with the pull `spec` once the store has it ready.
  void PullLater(PullSpec spec, wire::Encoding encoding, Answer answer,
                 std::optional<SharedReply> shared) {
    auto pulled = std::make_shared<std::vector<ChunkView>>();
    const bool drop = DropThisReply();
    store_->PullWhenReady(
        std::move(spec),
        // Under the chunk's lock: only takes a reference to the values.
        [pulled](const ChunkView& c) { pulled->push_back(c); },
        [pulled, encoding, answer = std::move(answer), drop,
         shared = std::move(shared),
         incarnation = Incarnation()](absl::Status s) {
          if (s.ok() && drop) s = DroppedReply();
          // A client that gave up may already read a later reply from the
          // same place.
          if (s.ok() && shared && answer.cancelled()) {
            s = absl::CancelledError("pull: cancelled; values not written");
          }
          if (s.ok()) {
            s = EncodePull(*pulled, encoding, incarnation,
                           shared ? &*shared : nullptr, answer.response);
          }
          pulled->clear();
          answer.finish(s);
        });
  }

  // The PullResponse bytes into *out: float32 values are sent straight from
  // the store's buffers (each slice keeps its buffer alive until gRPC has
  // sent it); fp16/bf16 are encoded into buffers that gRPC frees when sent.
  // With `shared`, the values are written into the worker's region instead
  // and the chunks go with empty data.
  static absl::Status EncodePull(const std::vector<ChunkView>& chunks,
                                 wire::Encoding encoding,
                                 uint64_t server_incarnation,
                                 const SharedReply* shared,
                                 grpc::ByteBuffer* out) {
    if (shared != nullptr) {
      DP_RETURN_IF_ERROR(
          shared->payloads->WriteReply(*shared->region, shared->offset, chunks));
    }
    std::vector<grpc::Slice> slices;
    slices.reserve(2 * chunks.size() + 1);
    if (server_incarnation != 0 || shared != nullptr) {
      slices.emplace_back(
          wire::PullResponseHead(server_incarnation, shared != nullptr));
    }
    for (const ChunkView& c : chunks) {
      const int64_t bytes = shared != nullptr
                                ? 0
                                : c.num_elements * wire::BytesPerValue(encoding);
      slices.emplace_back(wire::ChunkHeader(wire::kPullChunksField, c.chunk_id,
                                            c.version, encoding, bytes));
      if (bytes == 0) continue;
      if (encoding == wire::Encoding::kRawF32) {
        auto* keep = new std::shared_ptr<const void>(c.owner);
        slices.emplace_back(
            const_cast<float*>(c.data), static_cast<size_t>(bytes),
            [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
            keep);
        continue;
      }
      void* buf = std::malloc(static_cast<size_t>(bytes));
      wire::EncodeValues(encoding, c.data, c.num_elements, static_cast<char*>(buf));
      slices.emplace_back(buf, static_cast<size_t>(bytes), &std::free);
    }
    *out = grpc::ByteBuffer(slices.data(), slices.size());
    return absl::OkStatus();
  }

  // float32 payloads are validated and applied by the store straight from
  // the received slices (no gather); fp16/bf16 ones are decoded first.
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return ServeRaw(ctx, request, response, "push",
                    &ParameterServerService::PushTo);
  }

  void PushTo(const PeerIdentity& identity, absl::string_view peer,
              wire::Pieces pieces, Answer answer) {
    wire::PushMessage msg;
    absl::StatusOr<PushResult> r = ApplyPush(identity, peer, &pieces,
                                             /*push_pull=*/false, &msg, nullptr);
    if (r.ok() && DropThisReply()) r = DroppedReply();
    if (r.ok()) {
      proto::PushResponse resp;
      resp.set_duplicate(r->duplicate);
      resp.set_dropped(r->dropped);
      resp.set_server_incarnation(Incarnation());
      for (int64_t v : r->versions) resp.add_versions(v);
      // An OK reply must carry a message.
      SerializeSmall(resp, answer.response);
    }
    answer.finish(r.status());
  }

  // Push, then the pushed chunks' values, in one call. The values are read
  // right after the optimizer wrote them, so they leave from cache. With
  // pull_min_version (a sync worker's last part to this shard), the reply
  // is the pull of every chunk that waits for that step, finished like
  // Pull's from whichever thread completes the step.
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    return ServeRaw(ctx, request, response, "push-pull",
                    &ParameterServerService::PushPullTo);
  }

  void PushPullTo(const PeerIdentity& identity, absl::string_view peer,
                  wire::Pieces pieces, Answer answer) {
    wire::PushMessage msg;
    std::optional<SharedReply> shared;
    absl::StatusOr<PushResult> r = ApplyPush(identity, peer, &pieces,
                                             /*push_pull=*/true, &msg, &shared);
    if (!r.ok()) return answer.finish(r.status());
    if (msg.pull_min_version != 0) {
      PullSpec spec;
      spec.min_version = msg.pull_min_version;
      spec.worker_id = msg.worker_id;
      spec.with_push = true;
      spec.max_response_bytes = kMaxMessageBytes;
      const auto encoding = static_cast<wire::Encoding>(msg.pull_encoding);
      spec.value_bytes = wire::BytesPerValue(encoding);
      return PullLater(std::move(spec), encoding, std::move(answer),
                       std::move(shared));
    }
    std::vector<int32_t> ids;
    ids.reserve(msg.chunks.size());
    for (const wire::WireChunk& c : msg.chunks) ids.push_back(c.chunk_id);
    std::vector<ChunkView> pulled;
    pulled.reserve(ids.size());
    // (An empty list would mean every chunk to Pull; nothing was pushed.)
    absl::Status s = ids.empty() ? absl::OkStatus()
                                 : store_->Pull(ids, [&pulled](const ChunkView& c) {
                                     pulled.push_back(c);
                                   });
    if (s.ok() && DropThisReply()) s = DroppedReply();
    if (s.ok()) {
      s = EncodePull(pulled, static_cast<wire::Encoding>(msg.pull_encoding),
                     Incarnation(), shared ? &*shared : nullptr,
                     answer.response);
    }
    answer.finish(s);
  }

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    if (absl::Status s = Authorize(*ctx); !s.ok()) return Finish(ctx, s);
    proto::StatsRequest req;
    if (absl::Status s = ParseSmall(*request, &req); !s.ok()) {
      return Finish(ctx, s);
    }
    proto::StatsResponse resp;
    StatsToProto(store_->Stats(), &resp);
    if (req.has_shared_memory_probe()) {
      const absl::StatusOr<std::shared_ptr<MappedRegion>> region =
          shared_.Region(ctx->peer(), SharedRefFromProto(req.shared_memory_probe()),
                         options_.replica != nullptr);
      resp.set_shared_memory(region.ok() ? "ok"
                                         : std::string(region.status().message()));
      if (region.ok()) {
        ServeCalls(*region, SharedRefFromProto(req.shared_memory_probe()), *ctx);
      }
    }
    SerializeSmall(resp, response);
    return Finish(ctx, absl::OkStatus());
  }

 private:
  // A push's body: the request's bytes, answered through `answer`; run on
  // gRPC's calls and on calls through shared memory (ServeCalls).
  using PushBody = void (ParameterServerService::*)(const PeerIdentity&,
                                                     absl::string_view,
                                                     wire::Pieces, Answer);

  // A raw gRPC push or push-pull (`what` names it in errors): admitted,
  // then `body` on its slices with the reactor as its answer.
  grpc::ServerUnaryReactor* ServeRaw(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response,
                                     const char* what, PushBody body) {
    if (absl::Status s = Admit(*ctx); !s.ok()) return Finish(ctx, s);
    std::vector<grpc::Slice> slices;
    if (!request->Dump(&slices).ok()) {
      return Finish(ctx, absl::InternalError(
                             absl::StrCat(what, ": cannot read the request")));
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    (this->*body)(PeerIdentityOf(*ctx), ctx->peer(), PiecesOf(slices),
                  GrpcAnswer(ctx, response, reactor));
    return reactor;
  }

  // Once a worker's region has passed an admitted probe: a thread that
  // answers its pushes through the region's call block for this shard, when
  // it has one (rpc/shared_calls.h). The calls act with the probe's peer
  // and certificate.
  void ServeCalls(const std::shared_ptr<MappedRegion>& region,
                  const wire::SharedRef& ref,
                  const grpc::CallbackServerContext& ctx) {
    const absl::StatusOr<int> shard = shared_.CallShard(*region);
    if (!shard.ok()) return;
    absl::MutexLock l(&calls_mu_);
    if (calls_stopped_) return;
    for (auto it = call_servers_.begin(); it != call_servers_.end();) {
      it = it->second->serving() ? std::next(it) : call_servers_.erase(it);
    }
    if (call_servers_.count(region.get()) > 0 ||
        call_servers_.size() >= kMaxCallServers) {
      return;
    }
    const PeerIdentity identity = PeerIdentityOf(ctx);
    const std::string peer = ctx.peer();
    call_servers_[region.get()] = std::make_unique<SharedCallServer>(
        region, ref, *shard,
        [this, identity, peer](CallMethod method, std::string request,
                               SharedCallAnswer call) {
          // The request's bytes are read only until the push is applied.
          const bool push = method == CallMethod::kPush;
          const PushBody body = push ? &ParameterServerService::PushTo
                                     : &ParameterServerService::PushPullTo;
          (this->*body)(identity, peer, {absl::string_view(request)},
                        SlotAnswer(std::move(call), reporter_,
                                   push ? "Push" : "PushPull",
                                   static_cast<int64_t>(request.size())));
        });
  }

  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                          const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  // Parses a push and hands it to the store; a leave's result is an empty
  // PushResult. For a PushPull (push_pull), a leave or an unknown
  // pull_encoding is refused before anything is applied; so is a push for a
  // worker the caller's certificate does not name (rpc/peer_identity.h). A
  // push naming shared memory is read in the region, mapped until the store
  // has applied it (SharedPayloads::TakePush); a PushPull's reply goes there
  // too (*shared).
  absl::StatusOr<PushResult> ApplyPush(const PeerIdentity& identity,
                                       absl::string_view peer,
                                       wire::Pieces* request, bool push_pull,
                                       wire::PushMessage* msg,
                                       std::optional<SharedReply>* shared) {
    wire::Pieces& pieces = *request;
    absl::StatusOr<wire::PushMessage> parsed = wire::ParsePushRequest(pieces);
    if (!parsed.ok()) return parsed.status();
    *msg = *std::move(parsed);
    DP_RETURN_IF_ERROR(CheckActsForWorker(identity, msg->worker_id,
                                          options_.require_task_certificates));
    if (push_pull && (msg->pull_encoding < 0 ||
                      msg->pull_encoding > std::numeric_limits<int>::max() ||
                      !proto::Encoding_IsValid(
                          static_cast<int>(msg->pull_encoding)))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push-pull: unknown pull_encoding ", msg->pull_encoding));
    }
    if (msg->leave && push_pull) {
      return absl::InvalidArgumentError("a leave goes by Push, not PushPull");
    }
    if (msg->pull_min_version < 0 || (!push_pull && msg->pull_min_version != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          push_pull ? "push-pull: negative pull_min_version "
                    : "push: pull_min_version is for PushPull only, got ",
          msg->pull_min_version));
    }
    // The pieces of a push named in shared memory point into the region:
    // held here until the store has applied them (the cache may drop it
    // meanwhile, once the worker has closed it or for another region).
    std::shared_ptr<MappedRegion> region;
    if (msg->shared.has_value()) {
      if (msg->leave) {
        return absl::InvalidArgumentError("a leave names no shared memory");
      }
      if (push_pull && msg->pull_encoding != 0) {
        return absl::InvalidArgumentError(
            "push-pull: shared-memory values are float32 only");
      }
      DP_ASSIGN_OR_RETURN(region, shared_.Region(peer, *msg->shared,
                                                 options_.replica != nullptr));
      DP_RETURN_IF_ERROR(shared_.TakePush(*region, *msg->shared, push_pull,
                                          msg, &pieces));
      if (shared != nullptr) {
        *shared = SharedReply{region, msg->shared->reply_offset, &shared_};
      }
    }
    if (options_.replica == nullptr) {
      return ApplyParsedPush(store_, options_.observer, pieces, *msg);
    }
    // Forwarded as the worker sent it; applied here once the standby has.
    std::string bytes;
    for (const absl::string_view p : pieces) bytes.append(p.data(), p.size());
    absl::StatusOr<PushResult> r;
    const absl::Status s = options_.replica->ReplicateAndApply(
        ForwardKind::kPush, bytes, [&] {
          r = ApplyParsedPush(store_, options_.observer, pieces, *msg);
          return r.status();
        });
    if (!s.ok()) return s;
    return r;
  }

 public:
  // A parsed push (or leave) applied to the store; the service's and a
  // standby's (ApplyForwardedChange) way.
  static absl::StatusOr<PushResult> ApplyParsedPush(
      ParameterStore* store, ServiceObserver* observer,
      const wire::Pieces& pieces, const wire::PushMessage& msg) {
    if (msg.leave) {
      if (!msg.chunks.empty()) {
        return absl::InvalidArgumentError("a leave push carries no gradients");
      }
      DP_RETURN_IF_ERROR(store->Leave(msg.worker_id));
      return PushResult();
    }
    std::vector<absl::string_view> ranges;
    DP_ASSIGN_OR_RETURN(std::vector<ChunkBytes> grads,
                        Payloads(pieces, msg, &ranges));
    const PushId id{msg.worker_id, msg.seq, msg.part,
                    msg.num_parts == 0 ? 1 : msg.num_parts, msg.incarnation};
    // The slices (and so `ranges`) stay alive until the store returns.
    if (observer == nullptr) return store->Push(id, grads);
    const absl::Time start = absl::Now();
    absl::StatusOr<PushResult> r = store->Push(id, grads);
    if (r.ok()) ReportPush(observer, msg, *r, absl::Now() - start);
    return r;
  }

 private:

  // ServiceOptions::observer, after a push the store handled.
  static void ReportPush(ServiceObserver* observer,
                         const wire::PushMessage& msg, const PushResult& r,
                         absl::Duration apply_time) {
    PushEvent e;
    e.worker_id = msg.worker_id;
    e.duplicate = r.duplicate;
    e.dropped = r.dropped;
    e.apply_time = apply_time;
    for (size_t i = 0; i < msg.chunks.size(); ++i) {
      e.bytes += msg.chunks[i].data.size;
      if (i < r.versions.size()) {
        e.staleness.push_back(
            std::max<int64_t>(0, r.versions[i] - 1 - msg.chunks[i].version));
      }
    }
    observer->OnPush(e);
  }

  // ServiceOptions::authenticator.
  absl::Status Authorize(const grpc::CallbackServerContext& ctx) const {
    if (options_.authenticator == nullptr) return absl::OkStatus();
    return options_.authenticator->Check(ctx);
  }
  // Authorize, and on a standby shard the replica's admission.
  absl::Status Admit(const grpc::CallbackServerContext& ctx) const {
    DP_RETURN_IF_ERROR(Authorize(ctx));
    if (options_.replica == nullptr) return absl::OkStatus();
    return options_.replica->AdmitClient();
  }
  uint64_t Incarnation() const {
    return options_.replica == nullptr
               ? options_.server_incarnation
               : options_.replica->server_incarnation();
  }

  // The gradients of a parsed push as the store takes them. float32
  // payloads are not copied: each is a list of ranges of the received slices
  // (kept in *ranges, which must outlive the result). fp16/bf16 payloads
  // are decoded into this thread's scratch buffer.
  static absl::StatusOr<std::vector<ChunkBytes>> Payloads(
      const wire::Pieces& pieces, const wire::PushMessage& msg,
      std::vector<absl::string_view>* ranges) {
    const std::vector<absl::Span<const absl::string_view>> payload =
        wire::PayloadRanges(pieces, msg.chunks, ranges);
    std::vector<ChunkBytes> grads(msg.chunks.size());
    int64_t scratch_floats = 0;
    for (size_t i = 0; i < msg.chunks.size(); ++i) {
      const wire::WireChunk& c = msg.chunks[i];
      const int bpv = wire::BytesPerValue(c.encoding);
      grads[i].chunk_id = c.chunk_id;
      grads[i].base_version = c.version;
      if (c.encoding == wire::Encoding::kRawF32) {
        // Any size: the store checks it against the chunk (and counts a
        // wrong one).
        grads[i].num_bytes = c.data.size;
        grads[i].pieces = payload[i];
        continue;
      }
      if (c.data.size % bpv != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "push: chunk ", c.chunk_id, " has ", c.data.size, " bytes, not a "
            "whole number of ", wire::EncodingName(c.encoding), " values"));
      }
      grads[i].num_bytes = c.data.size / bpv * 4;
      scratch_floats += c.data.size / bpv;
    }
    if (scratch_floats == 0) return grads;
    std::vector<float>& scratch = ThreadScratch();
    if (static_cast<int64_t>(scratch.size()) < scratch_floats) {
      scratch.resize(static_cast<size_t>(scratch_floats));
    }
    std::string bytes_scratch;
    int64_t used = 0;
    for (size_t i = 0; i < msg.chunks.size(); ++i) {
      if (msg.chunks[i].encoding == wire::Encoding::kRawF32) continue;
      const int64_t n = grads[i].num_bytes / 4;
      float* dst = scratch.data() + used;
      absl::Status s =
          wire::DecodeInto(pieces, msg.chunks[i], dst, n, &bytes_scratch);
      if (!s.ok()) return s;
      grads[i].data = dst;
      used += n;
    }
    return grads;
  }

  // ServiceOptions::debug_drop_reply_every.
  bool DropThisReply() {
    const int every = options_.debug_drop_reply_every;
    return every > 0 && replies_.fetch_add(1) % every == every - 1;
  }
  static absl::Status DroppedReply() {
    return absl::UnavailableError("debug: reply dropped (--debug_drop_reply_every)");
  }

  static constexpr size_t kMaxCallServers = 64;

  ParameterStore* const store_;  // Not owned.
  const ServiceOptions options_;
  SharedPayloads shared_;
  std::atomic<int64_t> replies_{0};
  const std::shared_ptr<SharedCallReporter> reporter_ =
      std::make_shared<SharedCallReporter>(options_.observer);
  absl::Mutex calls_mu_;
  // By region; each holds its region mapped while it serves.
  std::map<const MappedRegion*, std::unique_ptr<SharedCallServer>> call_servers_
      ABSL_GUARDED_BY(calls_mu_);
  bool calls_stopped_ ABSL_GUARDED_BY(calls_mu_) = false;
};

}  // namespace

absl::Status ApplyForwardedChange(ParameterStore* store, ForwardKind kind,
                                  const std::string& request) {
  if (kind == ForwardKind::kDeclare) {
    proto::DeclareModelRequest parsed;
    if (!parsed.ParseFromString(request)) {
      return absl::InvalidArgumentError("forward: malformed DeclareModelRequest");
    }
    for (const proto::ChunkValues& c : parsed.initial()) {
      if (c.encoding() != proto::RAW_F32) {
        return absl::InvalidArgumentError(
            "declare: initial values must be RAW_F32");
      }
    }
    return store->Declare(LayoutFromProto(parsed.layout()),
                          ViewChunks(parsed.initial()))
        .status();
  }
  const wire::Pieces pieces = {absl::string_view(request)};
  DP_ASSIGN_OR_RETURN(wire::PushMessage msg, wire::ParsePushRequest(pieces));
  return ParameterServerService::ApplyParsedPush(store, nullptr, pieces, msg)
      .status();
}

void StopSharedCalls(grpc::Service* service) {
  if (auto* s = dynamic_cast<ParameterServerService*>(service)) {
    s->StopSharedCalls();
  }
}

std::unique_ptr<grpc::Service> NewParameterServerService(
    ParameterStore* store, const ServiceOptions& options) {
  ServiceOptions with_incarnation = options;
  if (with_incarnation.server_incarnation == 0) {
    with_incarnation.server_incarnation = NewIncarnation();
  }
  return std::make_unique<ParameterServerService>(store, with_incarnation);
}

}  // namespace downpour
