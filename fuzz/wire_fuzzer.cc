// libFuzzer target: every request type's parser. The first byte
// picks PushRequest / PullResponse (rpc/wire.h's hand-written readers, over
// the input cut into up to three pieces, payloads decoded), or PullRequest,
// DeclareModelRequest (then its layout validated) and StatsRequest through
// protobuf's generated parsers, as the server reads them. A push the
// hand-written reader accepts must read the same through protobuf.
#include <cstdint>
#include <string>
#include <vector>

#include "common/sharding.h"
#include "fuzz/fuzz_util.h"
#include "proto/parameter_server.pb.h"
#include "rpc/rpc_convert.h"
#include "rpc/wire.h"

namespace downpour {
namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

wire::Pieces CutInto(const std::string& bytes, fuzz::FuzzInput* in) {
  wire::Pieces pieces;
  absl::string_view rest(bytes);
  for (int i = 0; i < 2 && !rest.empty(); ++i) {
    const size_t at = in->Byte() % (rest.size() + 1);
    pieces.push_back(rest.substr(0, at));
    rest.remove_prefix(at);
  }
  pieces.push_back(rest);
  return pieces;
}

void DecodeAll(const wire::Pieces& pieces,
               const std::vector<wire::WireChunk>& chunks) {
  std::vector<float> dst;
  std::string scratch;
  std::vector<absl::string_view> storage;
  wire::PayloadRanges(pieces, chunks, &storage);
  for (const wire::WireChunk& c : chunks) {
    const int bpv = wire::BytesPerValue(c.encoding);
    const int64_t n = c.data.size / bpv;
    dst.resize(static_cast<size_t>(n) + 1);
    (void)wire::DecodeInto(pieces, c, dst.data(), n, &scratch);
    (void)wire::DecodeInto(pieces, c, dst.data(), n + 1, &scratch);  // Wrong n.
  }
}

void FuzzPush(const std::string& bytes, fuzz::FuzzInput* in) {
  const wire::Pieces pieces = CutInto(bytes, in);
  absl::StatusOr<wire::PushMessage> m = wire::ParsePushRequest(pieces);
  if (!m.ok()) return;
  DecodeAll(pieces, m->chunks);
  // What the hand-written reader accepts, protobuf reads the same way.
  proto::PushRequest p;
  Check(p.ParseFromString(bytes));
  Check(p.worker_id() == m->worker_id && p.seq() == m->seq &&
        p.leave() == m->leave && p.part() == m->part &&
        p.num_parts() == m->num_parts &&
        p.gradients_size() == static_cast<int>(m->chunks.size()));
  std::vector<absl::string_view> storage;
  const auto ranges = wire::PayloadRanges(pieces, m->chunks, &storage);
  for (size_t i = 0; i < m->chunks.size(); ++i) {
    const proto::ChunkGradient& g = p.gradients(static_cast<int>(i));
    Check(g.chunk_id() == m->chunks[i].chunk_id &&
          g.base_version() == m->chunks[i].version &&
          static_cast<int64_t>(g.data().size()) == m->chunks[i].data.size);
    std::string joined;
    for (absl::string_view r : ranges[i]) joined.append(r.data(), r.size());
    Check(joined == g.data());
  }
}

void FuzzPullResponse(const std::string& bytes, fuzz::FuzzInput* in) {
  const wire::Pieces pieces = CutInto(bytes, in);
  uint64_t server_incarnation = 0;
  absl::StatusOr<std::vector<wire::WireChunk>> chunks =
      wire::ParsePullResponse(pieces, &server_incarnation);
  if (!chunks.ok()) return;
  DecodeAll(pieces, *chunks);
  proto::PullResponse p;
  Check(p.ParseFromString(bytes));
  Check(p.chunks_size() == static_cast<int>(chunks->size()));
  Check(p.server_incarnation() == server_incarnation);
}

void FuzzDeclare(const std::string& bytes) {
  proto::DeclareModelRequest req;
  if (!req.ParseFromString(bytes)) return;
  LayoutLimits limits;
  limits.max_chunks = 1 << 14;  // Keeps one execution fast.
  (void)ComputeShardMap(LayoutFromProto(req.layout()), limits);
}

}  // namespace
}  // namespace downpour

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  downpour::fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Byte() % 5;
  const uint8_t cuts[2] = {in.Byte(), in.Byte()};
  downpour::fuzz::FuzzInput cut_input(cuts, 2);
  const std::string bytes = in.Rest();
  switch (which) {
    case 0:
      downpour::FuzzPush(bytes, &cut_input);
      break;
    case 1:
      downpour::FuzzPullResponse(bytes, &cut_input);
      break;
    case 2: {
      downpour::proto::PullRequest req;
      (void)req.ParseFromString(bytes);
      break;
    }
    case 3:
      downpour::FuzzDeclare(bytes);
      break;
    default: {
      downpour::proto::StatsRequest req;
      (void)req.ParseFromString(bytes);
      downpour::proto::StatsResponse resp;
      if (resp.ParseFromString(bytes)) (void)downpour::StatsFromProto(resp);
      break;
    }
  }
  return 0;
}
