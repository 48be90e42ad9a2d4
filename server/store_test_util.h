// File: server/store_test_util.h
//
// Test helpers for the parameter store and its step-policy tests, which all
// test through ParameterStore's public API: a layout cut into several chunks
// (TestLayout, Fixture, ChunksOf, Snapshot, InPieces), a tiny one-shard
// layout with a store in a given mode whose log is captured (TinyLayout,
// NewModeStore), constant pushes (PushConst, PartOf), reads (Values),
// pulls that may wait (StartPull) and the two parts of pushes raced
// (RacePushParts).
//
// Thread-safety: ModeFixture::logs is guarded by ModeFixture::mu; the rest
// is single-threaded test code. testonly.
#ifndef DOWNPOUR_SERVER_STORE_TEST_UTIL_H_
#define DOWNPOUR_SERVER_STORE_TEST_UTIL_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/sharding.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"

namespace downpour {
namespace store_test {

inline ModelLayout TestLayout(int shards) {
  ModelLayout l;
  l.tensors = {{"a", {64, 300}}, {"b", {7}}, {"c", {3, 5}}};
  l.num_shards = shards;
  l.max_chunk_bytes = 16 << 10;   // forces "a" into several chunks
  l.spread_min_bytes = 4 << 10;
  return l;
}

struct Fixture {
  ModelLayout layout;
  ShardMap map;
  std::vector<float> flat;  // the whole model
};

inline Fixture MakeFixture(int shards) {
  Fixture f;
  f.layout = TestLayout(shards);
  f.map = *ComputeShardMap(f.layout);
  f.flat.resize(f.map.total_elements);
  for (size_t i = 0; i < f.flat.size(); ++i) f.flat[i] = 0.001f * i;
  return f;
}

inline std::vector<ChunkBytes> ChunksOf(const Fixture& f, int shard,
                                 const std::vector<float>& flat) {
  std::vector<ChunkBytes> out;
  for (int32_t id : f.map.shard_chunks[shard]) {
    const Chunk& c = f.map.chunks[id];
    out.push_back({id, 0, flat.data() + c.flat_offset, c.num_elements * 4});
  }
  return out;
}

inline std::unique_ptr<ParameterStore> NewStore(int shard, int shards,
                                         const std::string& opt = "sgd",
                                         float lr = 1.0f) {
  ParameterStoreOptions o;
  o.shard_index = shard;
  o.num_shards = shards;
  o.optimizer.name = opt;
  o.optimizer.learning_rate = lr;
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// The shard's values gathered into a flat model-sized vector (other shards'
// positions left at 0), plus the versions by chunk id.
inline std::vector<float> Snapshot(ParameterStore& store, const Fixture& f,
                            std::vector<int64_t>* versions = nullptr) {
  std::vector<float> flat(f.flat.size(), 0.0f);
  if (versions) versions->assign(f.map.chunks.size(), -1);
  EXPECT_TRUE(store
                  .Pull({},
                        [&](const ChunkView& c) {
                          const Chunk& info = f.map.chunks[c.chunk_id];
                          std::copy(c.data, c.data + c.num_elements,
                                    flat.begin() + info.flat_offset);
                          if (versions) (*versions)[c.chunk_id] = c.version;
                        })
                  .ok());
  return flat;
}

// Cuts each chunk's bytes into pieces of the given sizes (cycled), at odd
// offsets, so values straddle pieces; `storage` keeps the views.
inline std::vector<ChunkBytes> InPieces(const std::vector<ChunkBytes>& whole,
                                 const std::vector<size_t>& sizes,
                                 std::vector<std::vector<absl::string_view>>* storage) {
  storage->assign(whole.size(), {});
  std::vector<ChunkBytes> out = whole;
  for (size_t i = 0; i < whole.size(); ++i) {
    const absl::string_view all(static_cast<const char*>(whole[i].data),
                                static_cast<size_t>(whole[i].num_bytes));
    for (size_t at = 0, k = 0; at < all.size(); ++k) {
      const size_t n = std::min(sizes[k % sizes.size()], all.size() - at);
      (*storage)[i].push_back(all.substr(at, n));
      at += n;
    }
    out[i].data = nullptr;
    out[i].pieces = (*storage)[i];
  }
  return out;
}

inline ModelLayout TinyLayout() {
  ModelLayout l;
  l.tensors = {{"w", {4}}, {"b", {2}}};
  l.num_shards = 1;
  return l;
}

struct ModeFixture {
  std::unique_ptr<ParameterStore> store;
  absl::Mutex mu;
  std::vector<std::string> logs ABSL_GUARDED_BY(mu);
};

inline std::unique_ptr<ModeFixture> NewModeStore(TrainMode mode, int workers,
                                          int k = 0, int min_replicas = 1,
                                          absl::Duration timeout = absl::Seconds(30),
                                          int staleness = 0,
                                          absl::Duration join_timeout = absl::ZeroDuration()) {
  auto f = std::make_unique<ModeFixture>();
  ParameterStoreOptions o;
  o.optimizer.name = "sgd";
  o.optimizer.learning_rate = 1.0f;
  o.mode = mode;
  o.num_workers = workers;
  o.replicas_to_aggregate = k;
  o.min_replicas = min_replicas;
  o.sync_timeout = timeout;
  o.join_timeout = join_timeout;
  o.staleness = staleness;
  ModeFixture* raw = f.get();
  o.log = [raw](const std::string& m) {
    absl::MutexLock l(&raw->mu);
    raw->logs.push_back(m);
  };
  auto s = ParameterStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  f->store = std::move(*s);
  std::vector<float> zeros(6, 0.0f);
  ShardMap map = *ComputeShardMap(TinyLayout());
  std::vector<ChunkBytes> init;
  for (const Chunk& c : map.chunks) {
    init.push_back({c.id, 0, zeros.data() + c.flat_offset, c.num_elements * 4});
  }
  EXPECT_TRUE(f->store->Declare(TinyLayout(), init).ok());
  return f;
}

// A push of the constant gradient `g` computed from `base`.
inline absl::StatusOr<PushResult> PushConst(ParameterStore& s, int worker, int64_t seq,
                                     float g, int64_t base) {
  std::vector<float> grad(6, g);
  ShardMap map = *ComputeShardMap(TinyLayout());
  std::vector<ChunkBytes> grads;
  for (const Chunk& c : map.chunks) {
    grads.push_back({c.id, base, grad.data() + c.flat_offset, c.num_elements * 4});
  }
  return s.Push(worker, seq, grads);
}

inline std::vector<float> Values(ParameterStore& s, int64_t* version = nullptr) {
  std::vector<float> out;
  EXPECT_TRUE(s.Pull({}, [&](const ChunkView& c) {
                 out.insert(out.end(), c.data, c.data + c.num_elements);
                 if (version) *version = c.version;
               }).ok());
  return out;
}

// Starts a waiting pull; returns a flag set (with the status) when answered.
struct PendingPull {
  absl::Notification done;
  absl::Status status;
  int64_t version = -1;
};
inline std::unique_ptr<PendingPull> StartPull(ParameterStore& s, int64_t min_version,
                                       int64_t clock) {
  auto p = std::make_unique<PendingPull>();
  PendingPull* raw = p.get();
  PullSpec spec;
  spec.min_version = min_version;
  spec.worker_clock = clock;
  s.PullWhenReady(spec, [raw](const ChunkView& c) { raw->version = c.version; },
                  [raw](absl::Status st) {
                    // Moved, so that this thread does not release the
                    // shared message after the waiting one read it (a
                    // count in uninstrumented abseil: TSan cannot see it).
                    raw->status = std::move(st);
                    raw->done.Notify();
                  });
  return p;
}

// Chunk `id` of TinyLayout's map holding the constant gradient g.
struct TinyPart {
  std::vector<float> grad = std::vector<float>(6);
  std::vector<ChunkBytes> chunks;
};
inline TinyPart PartOf(int32_t id, float g, int64_t base) {
  TinyPart p;
  std::fill(p.grad.begin(), p.grad.end(), g);
  const ShardMap map = *ComputeShardMap(TinyLayout());
  const Chunk& c = map.chunks[id];
  p.chunks.push_back({c.id, base, p.grad.data() + c.flat_offset,
                      c.num_elements * 4});
  return p;
}

// Races the two parts of worker 0's pushes seq = 1..rounds (TinyLayout's
// chunks 0 and 1, gradient 1 each, computed from base(seq)): part 1 from a
// thread started once, part 0 from this one, at about the same time, so the
// store claims them in one order and the policy may take them in the
// other. before(seq) runs first; after(seq), once both pushes returned,
// says whether to go on. Returns the seq after() stopped at, or 0.
inline int64_t RacePushParts(ParameterStore& s, int64_t rounds,
                             const std::function<int64_t(int64_t)>& base,
                             const std::function<void(int64_t)>& before,
                             const std::function<bool(int64_t)>& after) {
  const TinyPart p0 = PartOf(0, 1.0f, 0), p1 = PartOf(1, 1.0f, 0);
  auto from = [&](const TinyPart& p, int64_t seq) {
    std::vector<ChunkBytes> c = p.chunks;
    c[0].base_version = base(seq);
    return c;
  };
  std::atomic<int64_t> started{0}, finished{0};
  std::atomic<bool> stop{false};
  std::thread other([&] {
    for (int64_t seq = 1; seq <= rounds; ++seq) {
      while (started.load() < seq && !stop.load()) std::this_thread::yield();
      if (stop.load()) return;
      EXPECT_TRUE(s.Push(PushId{0, seq, 1, 2}, from(p1, seq)).ok());
      finished = seq;
    }
  });
  int64_t stopped = 0;
  for (int64_t seq = 1; seq <= rounds && stopped == 0; ++seq) {
    before(seq);
    started = seq;
    EXPECT_TRUE(s.Push(PushId{0, seq, 0, 2}, from(p0, seq)).ok());
    while (finished.load() < seq) std::this_thread::yield();
    if (!after(seq)) stopped = seq;
  }
  stop = true;  // Ends the thread if the loop stopped early.
  other.join();
  return stopped;
}

}  // namespace store_test
}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STORE_TEST_UTIL_H_
