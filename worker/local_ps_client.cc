#include "worker/local_ps_client.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "worker/chunk_io.h"
#include "worker/part_plan.h"

namespace downpour {
namespace {

class LocalParameterClient final : public ParameterClient {
 public:
  LocalParameterClient(std::vector<ParameterStore*> stores, int32_t worker_id)
      : stores_(std::move(stores)), worker_id_(worker_id) {}

  absl::Status Declare(const ModelLayout& layout,
                       absl::Span<const float> initial) override {
    if (layout.num_shards != static_cast<int>(stores_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout is cut for ", layout.num_shards, " shards, client has ",
          stores_.size()));
    }
    DP_ASSIGN_OR_RETURN(ShardMap map, ComputeShardMap(layout));
    if (static_cast<int64_t>(initial.size()) != map.total_elements) {
      return absl::InvalidArgumentError("initial values do not fit the layout");
    }
    for (size_t s = 0; s < stores_.size(); ++s) {
      DP_RETURN_IF_ERROR(stores_[s]->Declare(layout, Slices(map, s, initial, {})).status());
    }
    map_ = std::move(map);
    return absl::OkStatus();
  }

  absl::Status Pull(absl::Span<float> params, std::vector<int64_t>* versions,
                    const PullOptions& options) override {
    DP_RETURN_IF_ERROR(CheckFlatSize(map_, params.size(), "Pull"));
    versions->assign(map_.chunks.size(), -1);
    for (size_t s = 0; s < stores_.size(); ++s) {
      DP_RETURN_IF_ERROR(PullShard(s, params, versions, options));
    }
    return absl::OkStatus();
  }

  // Shard s's part of Pull.
  absl::Status PullShard(size_t s, absl::Span<float> params,
                         std::vector<int64_t>* versions,
                         const PullOptions& options) {
    PullSpec spec;
    spec.min_version = options.min_version;
    spec.worker_clock = options.worker_clock;
    absl::Status copy_status, pull_status;
    absl::Notification done;
    // The sink and done may run on another thread (a push that completes
    // a sync step); this thread waits for them.
    stores_[s]->PullWhenReady(
        std::move(spec),
        [&, s](const ChunkView& c) {
          if (!copy_status.ok()) return;
          copy_status = StoreChunk(map_, static_cast<int>(s), c.chunk_id,
                                   c.version, c.data, c.num_elements * 4,
                                   params, versions);
          if (copy_status.ok() && options.on_chunks) {
            const int32_t id = c.chunk_id;
            options.on_chunks(absl::MakeConstSpan(&id, 1));
          }
        },
        [&](absl::Status st) {
          // Moved: this thread must not release the message after the
          // caller read it (abseil counts it where TSan cannot see).
          pull_status = std::move(st);
          done.Notify();
        });
    done.WaitForNotification();
    DP_RETURN_IF_ERROR(pull_status);
    return copy_status;
  }

  absl::Status Leave() override {
    for (ParameterStore* s : stores_) DP_RETURN_IF_ERROR(s->Leave(worker_id_));
    return absl::OkStatus();
  }

  absl::Status Push(int64_t seq, absl::Span<const float> grads,
                    absl::Span<const int64_t> base_versions) override {
    DP_RETURN_IF_ERROR(CheckFlatSize(map_, grads.size(), "Push"));
    if (base_versions.size() != map_.chunks.size()) {
      return absl::InvalidArgumentError("Push: wrong number of base versions");
    }
    for (size_t s = 0; s < stores_.size(); ++s) {
      DP_RETURN_IF_ERROR(
          stores_[s]->Push(worker_id_, seq, Slices(map_, s, grads, base_versions))
              .status());
    }
    return absl::OkStatus();
  }

  absl::Status SetPushBreaks(std::vector<int64_t> breaks) override {
    breaks_ = std::move(breaks);
    piece_seq_ = 0;
    return absl::OkStatus();
  }

  // Each shard's chunks between two breaks are one part (PlanParts without
  // a size limit), pushed once the gradient from its first chunk on is
  // released; with `pulled`, the shard's values are read back after each
  // part.
  absl::Status PushFrom(int64_t seq, absl::Span<const float> grads,
                        absl::Span<const int64_t> base_versions, int64_t from,
                        const PulledValues* pulled) override {
    if (seq != piece_seq_) {
      DP_RETURN_IF_ERROR(CheckFlatSize(map_, grads.size(), "Push"));
      if (base_versions.size() != map_.chunks.size()) {
        return absl::InvalidArgumentError("Push: wrong number of base versions");
      }
      if (pulled != nullptr) {
        pulled->versions->assign(map_.chunks.size(), -1);
      }
      if (piece_seq_ == 0) {
        pieces_ = PlanParts(map_, std::numeric_limits<int64_t>::max(), 1,
                            breaks_);
      }
      piece_seq_ = seq;
      piece_sent_.assign(pieces_.size(), false);
    }
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const Part& p = pieces_[i];
      if (piece_sent_[i] || PartBegin(map_, p) < from) continue;
      std::vector<ChunkBytes> slices;
      for (int32_t id : p.chunk_ids) {
        const Chunk& c = map_.chunks[id];
        slices.push_back({id, base_versions[id], grads.data() + c.flat_offset,
                          c.num_elements * 4});
      }
      const PushId push{worker_id_, seq, p.index, p.count};
      DP_RETURN_IF_ERROR(stores_[p.shard]->Push(push, slices).status());
      piece_sent_[i] = true;
      if (pulled != nullptr) {
        DP_RETURN_IF_ERROR(PullShard(p.shard, pulled->params,
                                     pulled->versions, PullOptions()));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ShardStats>> Stats() override {
    std::vector<ShardStats> out;
    for (ParameterStore* s : stores_) out.push_back(s->Stats());
    return out;
  }

  const ShardMap& shard_map() const override { return map_; }

 private:
  static std::vector<ChunkBytes> Slices(const ShardMap& map, size_t shard,
                                        absl::Span<const float> flat,
                                        absl::Span<const int64_t> versions) {
    std::vector<ChunkBytes> out;
    for (int32_t id : map.shard_chunks[shard]) {
      const Chunk& c = map.chunks[id];
      out.push_back({id, versions.empty() ? 0 : versions[id],
                     flat.data() + c.flat_offset, c.num_elements * 4});
    }
    return out;
  }

  const std::vector<ParameterStore*> stores_;  // Not owned.
  const int32_t worker_id_;
  ShardMap map_;
  std::vector<int64_t> breaks_;  // SetPushBreaks.
  std::vector<Part> pieces_;     // Planned at the first PushFrom after it.
  // The piecewise push under way: its seq and which of pieces_ went.
  int64_t piece_seq_ = 0;
  std::vector<bool> piece_sent_;
};

}  // namespace

std::unique_ptr<ParameterClient> NewLocalParameterClient(
    std::vector<ParameterStore*> stores, int32_t worker_id) {
  return std::make_unique<LocalParameterClient>(std::move(stores), worker_id);
}

}  // namespace downpour
