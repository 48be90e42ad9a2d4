#include "worker/shared_route.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/credentials.h"
#include "rpc/rpc_convert.h"

namespace downpour {

SharedAttachment AttachSharedMemory(const ShardTransport& transport,
                                    const SharedRouteOptions& options,
                                    const ShardMap& map) {
  SharedAttachment a;
  const int shards = transport.num_shards();
  std::vector<bool> local(shards, false);
  for (int s = 0; s < shards; ++s) local[s] = IsLoopbackAddress(options.hosts[s]);
  if (!options.enabled || std::find(local.begin(), local.end(), true) == local.end() ||
      map.total_elements == 0) {
    return a;
  }
  const auto on_wire = [&](absl::string_view why) {
    a.note = absl::StrCat("payloads go over gRPC, not shared memory: ", why);
    return std::move(a);
  };
  if (options.has_standbys) return on_wire("the shards have standbys");
  if (!options.float32) return on_wire("fp16/bf16 on the wire asked for");
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Create(map.total_elements * 4, options.calls ? shards : 0);
  if (!region.ok()) return on_wire(region.status().message());
  // Only the shards on this host are told where the region is.
  proto::StatsRequest probe, plain;
  SharedRefToProto((*region)->ref(), probe.mutable_shared_memory_probe());
  std::vector<proto::StatsResponse> resp(shards);
  const absl::Status s = transport.CallEachShard(
      "GetStats",
      [&](int sh, grpc::ClientContext* ctx, auto done) {
        transport.stub(sh)->async()->GetStats(
            ctx, local[sh] ? &probe : &plain, &resp[sh], std::move(done));
      },
      [&](int sh) { resp[sh].Clear(); });
  if (!s.ok()) return on_wire(s.message());
  a.route.shards.assign(shards, false);
  std::vector<std::string> taken, refused;
  for (int sh = 0; sh < shards; ++sh) {
    if (!local[sh]) continue;
    if (resp[sh].shared_memory() == "ok") {
      a.route.shards[sh] = true;
      taken.push_back(absl::StrCat(sh));
    } else {
      refused.push_back(absl::StrCat(
          "shard ", sh, " at ", options.hosts[sh], ": ",
          resp[sh].shared_memory().empty() ? "it does not know shared memory"
                                           : resp[sh].shared_memory()));
    }
  }
  if (!taken.empty()) {
    a.region = *std::move(region);
    a.route.region = a.region.get();
    a.note = absl::StrCat("payloads to shard", taken.size() > 1 ? "s " : " ",
                          absl::StrJoin(taken, ", "),
                          " go through shared memory");
    if (a.region->call_shards() > 0) {
      std::vector<int64_t> chunks(shards);
      for (int sh = 0; sh < shards; ++sh) {
        chunks[sh] = static_cast<int64_t>(map.shard_chunks[sh].size());
      }
      auto calls = std::make_unique<SharedCallClient>(a.region.get(), chunks);
      std::vector<std::string> calling;
      for (int sh = 0; sh < shards; ++sh) {
        if (a.route.shards[sh] && calls->Serves(sh)) {
          calling.push_back(absl::StrCat(sh));
        }
      }
      if (!calling.empty()) {
        a.calls = std::move(calls);
        absl::StrAppend(&a.note, "; pushes to shard",
                        calling.size() > 1 ? "s " : " ",
                        absl::StrJoin(calling, ", "),
                        " go through it too, without gRPC");
      }
    }
  }
  if (!refused.empty()) {
    absl::StrAppend(&a.note, a.note.empty() ? "" : "; ",
                    "payloads go over gRPC to ", absl::StrJoin(refused, "; "));
  }
  return a;
}

}  // namespace downpour
