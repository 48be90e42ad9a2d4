// The gRPC ParameterClient put together from its pieces: part planning
// (worker/part_plan.h), each part's messages (worker/part_messages.h), the
// connections and the calls fanned out over them (worker/shard_transport.h)
// and the tracking of shard restarts (worker/shard_incarnations.h). This
// file says which messages go where, and checks the options.
#include "worker/grpc_ps_client.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "common/incarnation.h"
#include "common/status_macros.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/fan_out.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"
#include "rpc/wire.h"
#include "worker/carried_pulls.h"
#include "worker/chunk_io.h"
#include "worker/grpc_client_options.h"
#include "worker/part_messages.h"
#include "worker/part_plan.h"
#include "worker/shard_incarnations.h"
#include "worker/shard_transport.h"
#include "worker/shared_route.h"

namespace downpour {
namespace {

class GrpcParameterClient final : public ParameterClient {
 public:
  // `security` is o.security's, its hosts checked by CheckTargetIsSafe.
  GrpcParameterClient(const GrpcClientOptions& o, const ClientSecurity& security)
      : options_(o),
        transport_(TransportOptions(o), security),
        incarnations_(o.worker_id, static_cast<int>(o.hosts.size())),
        carried_(static_cast<int>(o.hosts.size())) {}

  absl::Status Declare(const ModelLayout& layout,
                       absl::Span<const float> initial) override;
  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options) override;
  absl::Status Leave() override {
    return transport_.LeaveEach(options_.worker_id, options_.incarnation);
  }
  absl::Status Push(int64_t seq, absl::Span<const float> grads,
                    absl::Span<const int64_t> base_versions) override;
  absl::Status PushPull(int64_t seq, absl::Span<const float> grads,
                        absl::Span<const int64_t> base_versions,
                        absl::Span<float> params, std::vector<int64_t>* versions,
                        const PullOptions& options) override;
  absl::Status SetPushBreaks(std::vector<int64_t> breaks) override;
  absl::Status PushFrom(int64_t seq, absl::Span<const float> grads,
                        absl::Span<const int64_t> base_versions, int64_t from,
                        const PulledValues* pulled) override;
  absl::Status PushRestThenPull(int64_t seq, absl::Span<const float> grads,
                                absl::Span<const int64_t> base_versions,
                                absl::Span<float> params,
                                std::vector<int64_t>* versions,
                                const PullOptions& options) override;
  absl::Status PushFromCarryingPulls(int64_t seq,
                                     absl::Span<const float> grads,
                                     absl::Span<const int64_t> base_versions,
                                     int64_t from, absl::Span<float> params,
                                     std::vector<int64_t>* versions,
                                     const PullOptions& options) override;
  absl::Status WaitCarriedPulls() override { return carried_.Wait(); }
  absl::StatusOr<std::vector<ShardStats>> Stats() override {
    return transport_.StatsOfEach();
  }
  const ShardMap& shard_map() const override { return map_; }
  float* PushStaging() override {
    return shared_.region == nullptr
               ? nullptr
               : reinterpret_cast<float*>(shared_.region->push_area());
  }

 private:
  // Sends parts_[i] for i in `which` of the piecewise push `seq` as Push
  // (or PushPull) calls, replies into (*resp)[i] for on_ok, and marks them
  // sent.
  absl::Status SendPieces(int64_t seq, absl::Span<const float> grads,
                          absl::Span<const int64_t> base_versions,
                          const std::vector<int>& which, bool push_pull,
                          std::vector<grpc::ByteBuffer>* resp,
                          const OnReply& on_ok);
  // Starts the piecewise push `seq` unless it is the one under way.
  absl::Status BeginPiece(int64_t seq, absl::Span<const float> grads,
                          absl::Span<const int64_t> base_versions,
                          const PulledValues* pulled);
  // Resets *versions; returns the on_ok for replies that carry values
  // (PullResponse): reads part i's into params/versions (and its server
  // incarnation into (*part_inc)[i] when part_inc is set), then frees it.
  OnReply ReadValues(absl::Span<float> params, std::vector<int64_t>* versions,
                     std::vector<grpc::ByteBuffer>* resp,
                     std::vector<uint64_t>* part_inc = nullptr,
                     const PullOptions* options = nullptr,
                     const std::vector<Part>* parts = nullptr);
  // ReadValues without resetting *versions; `parts` null: parts_.
  OnReply ReadInto(absl::Span<float> params, std::vector<int64_t>* versions,
                   std::vector<grpc::ByteBuffer>* resp,
                   std::vector<uint64_t>* part_inc,
                   const PullOptions* options,
                   const std::vector<Part>* parts = nullptr);
  // After a push call (part i acknowledged by incarnation (*part_inc)[i]):
  // sends again, with the same (seq, part), the parts that a shard's
  // previous process acknowledged (ShardIncarnations::ResendStaleParts);
  // on_ok(i) consumes part i's reply.
  absl::Status ResendToRestartedShards(const char* what, const char* method,
                                       int64_t seq,
                                       const std::vector<grpc::ByteBuffer>& req,
                                       std::vector<grpc::ByteBuffer>* resp,
                                       std::vector<uint64_t>* part_inc,
                                       const OnReply& on_ok);
  absl::Status CheckPush(absl::Span<const float> grads,
                         absl::Span<const int64_t> base_versions) const;
  // The on_ok of Push replies: part i's server incarnation into
  // (*part_inc)[i].
  OnReply ReadAcks(std::vector<grpc::ByteBuffer>* resp,
                   std::vector<uint64_t>* part_inc);
  // push_pull: PushPull requests (with the pull encoding; their replies
  // wait for step pull_min_version when it is > 0). One request per part
  // of `parts` (default: parts_), their bytes kept in `encoder` (default:
  // push_encoder_).
  std::vector<grpc::ByteBuffer> PushRequests(
      int64_t seq, absl::Span<const float> grads,
      absl::Span<const int64_t> base_versions, bool push_pull,
      const std::vector<Part>* parts = nullptr, int64_t pull_min_version = 0,
      PushEncoder* encoder = nullptr);
  // Starts parts_[i], shard `shard`'s last part of push seq, as a PushPull
  // whose reply waits for step options.min_version and reads as
  // pull_parts_[pull_part] into params/versions (CarriedPulls); `inc` is
  // the shard's incarnation now.
  void StartCarried(int i, int pull_part, uint64_t inc, int64_t seq,
                    absl::Span<const float> grads,
                    absl::Span<const int64_t> base_versions,
                    absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options);

  const GrpcClientOptions options_;
  ShardTransport transport_;
  ShardIncarnations incarnations_;
  ShardMap map_;
  std::vector<Part> parts_;
  // Pull's parts: not cut at the push breaks (a pull gains nothing from
  // smaller calls, and each call costs both ends CPU).
  std::vector<Part> pull_parts_;
  std::vector<int64_t> breaks_;        // SetPushBreaks.
  std::vector<int64_t> part_begin_;    // PartBegin of each of parts_.
  // The piecewise push under way (PushFrom): its seq, which parts went,
  // and the server incarnation that acknowledged each.
  int64_t piece_seq_ = 0;
  std::vector<bool> piece_sent_;
  std::vector<uint64_t> piece_inc_;
  // Per shard: its values came with its last part (PushFromCarryingPulls).
  std::vector<bool> piece_pulled_;
  bool servers_answered_ = false;  // WaitUntilAnswering succeeded once.
  // Its buffers are reused across pushes.
  PushEncoder push_encoder_;
  // The shards that take payloads through shared memory (Declare).
  SharedAttachment shared_;
  // Last: its calls, which use the members above, end first.
  CarriedPulls carried_;
};

absl::Status GrpcParameterClient::Declare(const ModelLayout& layout,
                                          absl::Span<const float> initial) {
  if (layout.num_shards != transport_.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout is cut for ", layout.num_shards, " shards but ",
        transport_.num_shards(), " server addresses were given"));
  }
  DP_RETURN_IF_ERROR(carried_.Wait());  // They use the map and the parts.
  DP_ASSIGN_OR_RETURN(ShardMap map, ComputeShardMap(layout));
  if (static_cast<int64_t>(initial.size()) != map.total_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values have ", initial.size(), " floats, layout has ",
        map.total_elements));
  }
  proto::ModelLayout layout_proto;
  LayoutToProto(layout, &layout_proto);
  DP_RETURN_IF_ERROR(CheckChunksFitMessages(layout, layout_proto, map));
  if (!servers_answered_) {
    DP_RETURN_IF_ERROR(transport_.WaitUntilAnswering(
        options_.connect_timeout, options_.stop_requested, options_.on_wait));
    servers_answered_ = true;
  }
  std::vector<Part> parts =
      PlanParts(map, options_.part_bytes, transport_.connections_per_shard());
  const std::vector<proto::DeclareModelRequest> req = DeclareRequests(
      layout_proto, map, parts, options_.worker_id, initial);
  std::vector<proto::DeclareModelResponse> resp(parts.size());
  std::vector<int> all(parts.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  FanOutCalls calls = transport_.PartCalls("DeclareModel", parts, all);
  calls.start = [&](int i, grpc::ClientContext* ctx, auto done) {
    const int shard = parts[i].shard;
    const int at = transport_.Active(shard);
    transport_.stub(shard)->async()->DeclareModel(
        ctx, &req[i], &resp[i], transport_.Track(shard, at, std::move(done)));
  };
  calls.reset = [&](int i) { resp[i].Clear(); };
  // Every server has answered: the usual deadline and retries.
  DP_RETURN_IF_ERROR(transport_.Run(calls, options_.rpc_timeout,
                                    /*wait_for_ready=*/true));
  for (size_t i = 0; i < parts.size(); ++i) {
    if (resp[i].shard_index() != parts[i].shard) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", options_.hosts[parts[i].shard], " is shard ",
          resp[i].shard_index(), " but was listed as shard ", parts[i].shard,
          " in --ps_hosts"));
    }
    incarnations_.Saw(parts[i].shard, resp[i].server_incarnation());
  }
  map_ = std::move(map);
  pull_parts_ = parts;
  parts_ = std::move(parts);
  if (shared_.region == nullptr ||  // Kept while the model fits it.
      shared_.region->area_bytes() < 4 * map_.total_elements) {
    // The old region's calls end before the region goes.
    transport_.set_shared_calls(nullptr);
    shared_.calls.reset();
    shared_ = AttachSharedMemory(transport_, SharedRouteOptionsFor(options_), map_);
    transport_.set_shared_calls(shared_.calls.get());
    if (!shared_.note.empty() && options_.on_note) options_.on_note(shared_.note);
  }
  return SetPushBreaks(breaks_);
}

absl::Status GrpcParameterClient::SetPushBreaks(std::vector<int64_t> breaks) {
  for (size_t i = 0; i < breaks.size(); ++i) {
    if (breaks[i] <= 0 || (i > 0 && breaks[i] <= breaks[i - 1])) {
      return absl::InvalidArgumentError(
          "push breaks must be positive and ascending");
    }
  }
  DP_RETURN_IF_ERROR(carried_.Wait());  // They use the parts.
  breaks_ = std::move(breaks);
  if (map_.chunks.empty()) return absl::OkStatus();  // Planned at Declare.
  parts_ = PlanParts(map_, options_.part_bytes,
                     transport_.connections_per_shard(), breaks_);
  part_begin_.clear();
  for (const Part& p : parts_) part_begin_.push_back(PartBegin(map_, p));
  piece_seq_ = 0;
  return absl::OkStatus();
}

OnReply GrpcParameterClient::ReadValues(absl::Span<float> params,
                                        std::vector<int64_t>* versions,
                                        std::vector<grpc::ByteBuffer>* resp,
                                        std::vector<uint64_t>* part_inc,
                                        const PullOptions* options,
                                        const std::vector<Part>* parts) {
  versions->assign(map_.chunks.size(), -1);
  return ReadInto(params, versions, resp, part_inc, options, parts);
}

OnReply GrpcParameterClient::ReadInto(absl::Span<float> params,
                                      std::vector<int64_t>* versions,
                                      std::vector<grpc::ByteBuffer>* resp,
                                      std::vector<uint64_t>* part_inc,
                                      const PullOptions* options,
                                      const std::vector<Part>* parts) {
  const wire::Store store = wire::StoreFor(
      static_cast<int64_t>(params.size() * sizeof(float)),
      options_.streaming_pull_min_bytes);
  if (parts == nullptr) parts = &parts_;
  return [this, params, versions, resp, store, part_inc, options,
          parts](int i) {
    const Part& part = (*parts)[i];
    uint64_t inc = 0;
    absl::Status s = ReadPulledPart(map_, part, (*resp)[i], params, versions,
                                    store, &inc, shared_.route);
    if (s.ok()) {
      incarnations_.Saw(part.shard, inc);
      if (part_inc != nullptr) (*part_inc)[i] = inc;
      if (options != nullptr && options->on_chunks) {
        options->on_chunks(part.chunk_ids);
      }
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
  const std::vector<grpc::ByteBuffer> req = PullRequests(
      pull_parts_, options_.worker_id, options, options_.pull_encoding,
      shared_.route);
  std::vector<grpc::ByteBuffer> resp(pull_parts_.size());
  return transport_.CallAllParts(
      "Pull", kPullMethod, pull_parts_, req, &resp,
      ReadValues(params, versions, &resp, /*part_inc=*/nullptr, &options,
                 &pull_parts_));
}

std::vector<grpc::ByteBuffer> GrpcParameterClient::PushRequests(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, bool push_pull,
    const std::vector<Part>* parts, int64_t pull_min_version,
    PushEncoder* encoder) {
  wire::PushHead head;
  head.worker_id = options_.worker_id;
  head.seq = seq;
  if (push_pull) head.pull_encoding = options_.pull_encoding;
  head.pull_min_version = pull_min_version;
  head.incarnation = options_.incarnation;
  if (encoder == nullptr) encoder = &push_encoder_;
  return encoder->Encode(map_, parts != nullptr ? *parts : parts_, head,
                         options_.push_encoding, grads, base_versions,
                         shared_.route);
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
  const OnReply on_ok = ReadAcks(&resp, &part_inc);
  DP_RETURN_IF_ERROR(
      transport_.CallAllParts("Push", kPushMethod, parts_, req, &resp, on_ok));
  return ResendToRestartedShards("Push", kPushMethod, seq, req, &resp,
                                 &part_inc, on_ok);
}

OnReply GrpcParameterClient::ReadAcks(std::vector<grpc::ByteBuffer>* resp,
                                      std::vector<uint64_t>* part_inc) {
  // A PushResponse is small: parsed for its server incarnation (an
  // unreadable one is not an error: the push was acknowledged).
  return [this, resp, part_inc](int i) {
    uint64_t inc = 0;
    if (ReadPushReply((*resp)[i], &inc)) {
      incarnations_.Saw(parts_[i].shard, inc);
      (*part_inc)[i] = inc;
    }
    return absl::OkStatus();
  };
}

absl::Status GrpcParameterClient::PushFrom(int64_t seq,
                                           absl::Span<const float> grads,
                                           absl::Span<const int64_t> base_versions,
                                           int64_t from,
                                           const PulledValues* pulled) {
  const int n = static_cast<int>(parts_.size());
  DP_RETURN_IF_ERROR(BeginPiece(seq, grads, base_versions, pulled));
  const char* what = pulled != nullptr ? "PushPull" : "Push";
  const char* method = pulled != nullptr ? kPushPullMethod : kPushMethod;
  std::vector<grpc::ByteBuffer> resp(n);
  const OnReply on_ok =
      pulled != nullptr
          ? ReadInto(pulled->params, pulled->versions, &resp, &piece_inc_,
                     /*options=*/nullptr)
          : ReadAcks(&resp, &piece_inc_);
  std::vector<int> which;
  for (int i = 0; i < n; ++i) {
    if (!piece_sent_[i] && part_begin_[i] >= from) which.push_back(i);
  }
  DP_RETURN_IF_ERROR(SendPieces(seq, grads, base_versions, which,
                                pulled != nullptr, &resp, on_ok));
  if (from > 0) return absl::OkStatus();
  // The whole push has gone: the parts a restarted shard's previous process
  // acknowledged go again.
  return incarnations_.ResendStaleParts(
      seq, parts_, &piece_inc_, [&](const std::vector<int>& stale) {
        const std::vector<grpc::ByteBuffer> all =
            PushRequests(seq, grads, base_versions, pulled != nullptr);
        return transport_.CallParts(what, method, parts_, stale, all, &resp,
                                    on_ok);
      });
}

absl::Status GrpcParameterClient::SendPieces(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, const std::vector<int>& which,
    bool push_pull, std::vector<grpc::ByteBuffer>* resp, const OnReply& on_ok) {
  if (which.empty()) return absl::OkStatus();
  std::vector<Part> some;
  for (int i : which) some.push_back(parts_[i]);
  std::vector<grpc::ByteBuffer> encoded =
      PushRequests(seq, grads, base_versions, push_pull, &some);
  std::vector<grpc::ByteBuffer> req(parts_.size());
  for (size_t k = 0; k < which.size(); ++k) {
    req[which[k]] = std::move(encoded[k]);
  }
  DP_RETURN_IF_ERROR(transport_.CallParts(
      push_pull ? "PushPull" : "Push",
      push_pull ? kPushPullMethod : kPushMethod, parts_, which, req, resp,
      on_ok));
  for (int i : which) piece_sent_[i] = true;
  return absl::OkStatus();
}

absl::Status GrpcParameterClient::BeginPiece(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, const PulledValues* pulled) {
  if (seq == piece_seq_) return absl::OkStatus();
  // Those of a push that failed elsewhere (its status was reported).
  carried_.Wait().IgnoreError();
  DP_RETURN_IF_ERROR(CheckPush(grads, base_versions));
  if (pulled != nullptr) {
    DP_RETURN_IF_ERROR(CheckFlatSize(map_, pulled->params.size(), "Pull"));
    DP_RETURN_IF_ERROR(CheckApart(grads, pulled->params, "PushFrom"));
    pulled->versions->assign(map_.chunks.size(), -1);
  }
  piece_seq_ = seq;
  piece_sent_.assign(parts_.size(), false);
  piece_inc_.assign(parts_.size(), 0);
  piece_pulled_.assign(transport_.num_shards(), false);
  return absl::OkStatus();
}

// A shard's part carries the pull as in PushRestThenPull (PlanPushEnd), and
// its reply counts likewise; else PushRestThenPull pulls the shard. The
// carried calls go on while the rest of the push does (CarriedPulls).
absl::Status GrpcParameterClient::PushFromCarryingPulls(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, int64_t from,
    absl::Span<float> params, std::vector<int64_t>* versions,
    const PullOptions& options) {
  DP_RETURN_IF_ERROR(BeginPiece(seq, grads, base_versions, nullptr));
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
  DP_RETURN_IF_ERROR(CheckApart(grads, params, "PushFromCarryingPulls"));
  const int n = static_cast<int>(parts_.size());
  std::vector<uint64_t> inc(transport_.num_shards());
  for (size_t sh = 0; sh < inc.size(); ++sh) inc[sh] = incarnations_.current(sh);
  const PushEnd end = PlanPushEnd(
      parts_, pull_parts_, piece_sent_, piece_inc_, inc,
      /*waits_for_step=*/options.min_version > 0 && options.worker_clock < 0);
  std::vector<int> plain;
  versions->resize(map_.chunks.size(), -1);
  for (int i = 0; i < n; ++i) {
    if (piece_sent_[i] || part_begin_[i] < from) continue;
    const int shard = parts_[i].shard;
    if (end.how[shard] != PushEndPull::kCarried) {
      plain.push_back(i);
      continue;
    }
    StartCarried(i, end.pull_part[shard], inc[shard], seq, grads,
                 base_versions, params, versions, options);
  }
  if (plain.empty()) return absl::OkStatus();
  std::vector<grpc::ByteBuffer> resp(n);
  return SendPieces(seq, grads, base_versions, plain, /*push_pull=*/false,
                    &resp, ReadAcks(&resp, &piece_inc_));
}

void GrpcParameterClient::StartCarried(
    int i, int pull_part, uint64_t inc, int64_t seq,
    absl::Span<const float> grads, absl::Span<const int64_t> base_versions,
    absl::Span<float> params, std::vector<int64_t>* versions,
    const PullOptions& options) {
  const int shard = parts_[i].shard;
  CarriedPull* c = carried_.Prepare(shard, static_cast<int>(parts_.size()));
  c->part = i;
  c->incarnation = inc;
  c->options = options;
  c->read_as[i] = pull_parts_[pull_part];
  const std::vector<Part> one = {parts_[i]};
  c->req[i] = std::move(PushRequests(seq, grads, base_versions,
                                     /*push_pull=*/true, &one,
                                     options.min_version, &c->encoder)[0]);
  // Acknowledged by whichever incarnation answers: PushRestThenPull reads
  // it once the call ended.
  piece_sent_[i] = true;
  carried_.Start(shard, [this, params, versions](CarriedPull* c) {
    const std::vector<int> which = {c->part};
    const auto good = [c, versions](int k) { return c->Brought(k, *versions); };
    const OnReply read = ReadInto(params, versions, &c->resp, &c->answered_by,
                                  /*options=*/nullptr, &c->read_as);
    return transport_.CallParts("Push", kPushPullMethod, parts_, which, c->req,
                                &c->resp,
                                ReadThenTell(read, good, &c->read_as,
                                             &c->options));
  });
}

// The push's parts that carry no pull go first, as PushFrom sends them: a
// call that waits for the step must not hold up a push that this or another
// worker waits for (a failed call is retried only once its round ended).
// Then the carried parts and the pulls of the shards with nothing left go
// together, as PlanPushEnd says. A shard's values are used only from the
// process that acknowledged its earlier parts and at the step asked for (a
// restored shard that lacks the rest of the gradient answers below it):
// else the stale parts go again, and that shard is pulled after them. The
// calls PushFromCarryingPulls left under way are waited for once these
// went; a shard whose carried reply did not bring its values is pulled
// after them too.
absl::Status GrpcParameterClient::PushRestThenPull(
    int64_t seq, absl::Span<const float> grads,
    absl::Span<const int64_t> base_versions, absl::Span<float> params,
    std::vector<int64_t>* versions, const PullOptions& options) {
  // On every way out, nothing is left under way.
  absl::Cleanup wait_carried = [this] { carried_.Wait().IgnoreError(); };
  DP_RETURN_IF_ERROR(BeginPiece(seq, grads, base_versions, nullptr));
  DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
  DP_RETURN_IF_ERROR(CheckApart(grads, params, "PushRestThenPull"));
  // Calls are numbered over parts_ (0 .. n-1), then pull_parts_ (n ..).
  const int n = static_cast<int>(parts_.size());
  const int np = static_cast<int>(pull_parts_.size());
  const int shards = transport_.num_shards();
  std::vector<uint64_t> inc(shards);
  PushEnd end;
  for (std::vector<int> plain;; plain.clear()) {
    for (int sh = 0; sh < shards; ++sh) inc[sh] = incarnations_.current(sh);
    end = PlanPushEnd(parts_, pull_parts_, piece_sent_, piece_inc_, inc,
                      /*waits_for_step=*/options.min_version > 0 &&
                          options.worker_clock < 0);
    for (int i = 0; i < n; ++i) {
      if (!piece_sent_[i] &&
          end.how[parts_[i].shard] != PushEndPull::kCarried) {
        plain.push_back(i);
      }
    }
    if (plain.empty()) break;
    std::vector<grpc::ByteBuffer> resp(n);
    DP_RETURN_IF_ERROR(SendPieces(seq, grads, base_versions, plain,
                                  /*push_pull=*/false, &resp,
                                  ReadAcks(&resp, &piece_inc_)));
  }
  std::vector<int> which;
  std::vector<Part> carry;
  for (int i = 0; i < n; ++i) {
    if (piece_sent_[i]) continue;
    which.push_back(i);
    carry.push_back(parts_[i]);
  }
  std::vector<grpc::ByteBuffer> carry_req =
      PushRequests(seq, grads, base_versions, /*push_pull=*/true, &carry,
                   options.min_version);
  std::vector<grpc::ByteBuffer> req(n + np), resp(n + np);
  std::vector<const char*> methods(n + np, kPushPullMethod);
  // Call k's reply is read as the pull part read_as[k].
  std::vector<Part> all(parts_), read_as(n + np);
  all.insert(all.end(), pull_parts_.begin(), pull_parts_.end());
  for (size_t k = 0; k < which.size(); ++k) {
    const int i = which[k];
    read_as[i] = pull_parts_[end.pull_part[parts_[i].shard]];
    req[i] = std::move(carry_req[k]);
  }
  const std::vector<grpc::ByteBuffer> pull_req = PullRequests(
      pull_parts_, options_.worker_id, options, options_.pull_encoding,
      shared_.route);
  for (int j = 0; j < np; ++j) {
    const int shard = pull_parts_[j].shard;
    if (end.how[shard] != PushEndPull::kNow) continue;
    if (piece_pulled_[shard] || carried_.running(shard)) continue;
    which.push_back(n + j);
    methods[n + j] = kPullMethod;
    read_as[n + j] = pull_parts_[j];
    req[n + j] = pull_req[j];
  }
  // Whether call k brought its shard's values for the step asked for.
  std::vector<uint64_t> got_inc(n + np, 0);
  const auto good = [&](int k) {
    if (got_inc[k] != inc[all[k].shard]) return false;
    for (int32_t id : read_as[k].chunk_ids) {
      if ((*versions)[id] < options.min_version) return false;
    }
    return true;
  };
  versions->resize(map_.chunks.size(), -1);
  for (const Chunk& c : map_.chunks) {  // Keeps what came or is coming.
    if (!piece_pulled_[c.shard] && !carried_.running(c.shard)) {
      (*versions)[c.id] = -1;
    }
  }
  const OnReply read = ReadInto(params, versions, &resp, &got_inc,
                                /*options=*/nullptr, &read_as);
  DP_RETURN_IF_ERROR(transport_.CallParts(
      "Push", methods, all, which, req, &resp,
      ReadThenTell(read, good, &read_as, &options)));
  std::vector<bool> pull_after(shards, false);
  for (int sh = 0; sh < shards; ++sh) {
    pull_after[sh] = end.how[sh] == PushEndPull::kAfter;
  }
  for (int k : which) {
    if (k < n) {
      piece_sent_[k] = true;
      piece_inc_[k] = got_inc[k];
    }
    if (!good(k)) pull_after[all[k].shard] = true;
  }
  std::move(wait_carried).Cancel();
  DP_RETURN_IF_ERROR(carried_.Wait([&](int shard, const CarriedPull& c) {
    piece_inc_[c.part] = c.answered_by[c.part];
    piece_pulled_[shard] = c.Brought(c.part, *versions);
    pull_after[shard] = !piece_pulled_[shard];
  }));
  DP_RETURN_IF_ERROR(incarnations_.ResendStaleParts(
      seq, parts_, &piece_inc_, [&](const std::vector<int>& stale) {
        for (int i : stale) pull_after[parts_[i].shard] = true;
        const std::vector<grpc::ByteBuffer> again =
            PushRequests(seq, grads, base_versions, /*push_pull=*/false);
        return transport_.CallParts("Push", kPushMethod, parts_, stale, again,
                                    &resp, ReadAcks(&resp, &piece_inc_));
      }));
  std::vector<int> pulls;
  for (int j = 0; j < np; ++j) {
    if (pull_after[pull_parts_[j].shard]) pulls.push_back(j);
  }
  if (pulls.empty()) return absl::OkStatus();
  std::vector<grpc::ByteBuffer> pull_resp(np);
  const OnReply read_pull = ReadInto(params, versions, &pull_resp,
                                     /*part_inc=*/nullptr, &options,
                                     &pull_parts_);
  if (static_cast<int>(pulls.size()) == np) {
    return transport_.CallAllParts("Pull", kPullMethod, pull_parts_, pull_req,
                                   &pull_resp, read_pull);
  }
  return transport_.CallParts("Pull", kPullMethod, pull_parts_, pulls,
                              pull_req, &pull_resp, read_pull);
}

absl::Status GrpcParameterClient::ResendToRestartedShards(
    const char* what, const char* method, int64_t seq,
    const std::vector<grpc::ByteBuffer>& req,
    std::vector<grpc::ByteBuffer>* resp, std::vector<uint64_t>* part_inc,
    const OnReply& on_ok) {
  return incarnations_.ResendStaleParts(
      seq, parts_, part_inc, [&](const std::vector<int>& stale) {
        return transport_.CallParts(what, method, parts_, stale, req, resp,
                                    on_ok);
      });
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
  DP_RETURN_IF_ERROR(CheckApart(grads, params, "PushPull"));
  // Each part's reply carries its values right after its push.
  const std::vector<grpc::ByteBuffer> req =
      PushRequests(seq, grads, base_versions, /*push_pull=*/true);
  std::vector<grpc::ByteBuffer> resp(parts_.size());
  std::vector<uint64_t> part_inc(parts_.size(), 0);
  const OnReply on_ok = ReadValues(params, versions, &resp, &part_inc);
  DP_RETURN_IF_ERROR(
      transport_.CallAllParts("PushPull", kPushPullMethod, parts_, req, &resp,
                              on_ok));
  // The parts sent again bring the new process's values.
  return ResendToRestartedShards("PushPull", kPushPullMethod, seq, req, &resp,
                                 &part_inc, on_ok);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterClient>> NewGrpcParameterClient(
    const GrpcClientOptions& options) {
  DP_ASSIGN_OR_RETURN(ClientSecurity security, CheckedSecurity(options));
  GrpcClientOptions with_incarnation = options;
  if (with_incarnation.incarnation == 0) {
    with_incarnation.incarnation = NewIncarnation();
  }
  return std::unique_ptr<ParameterClient>(
      new GrpcParameterClient(with_incarnation, security));
}

}  // namespace downpour
