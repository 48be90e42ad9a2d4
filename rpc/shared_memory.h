// File: rpc/shared_memory.h
//
// Tensor payloads between a worker and the shards on its own host, through
// shared memory instead of the TCP connection. gRPC still carries every
// call with its small fields (ids, versions, sequence numbers, tokens); only
// the float32 payloads move to a region the worker owns:
//
//   [header: magic, key, size][push area: the flat gradient][reply area: the
//                                        flat values][call blocks, optional]
//
// A chunk's payload sits at 4 * chunk.flat_offset in its area, so parts and
// shards never overlap, and a request names only the region
// (proto/parameter_server.proto, SharedMemory). The worker copies each
// pushed chunk into the push area before the call and reads each pulled
// chunk from the reply area after it; the server checks and applies a
// push's payloads where they are, while the call lasts (a value a client
// changes in between reaches no parameter as NaN or Inf:
// server/shared_payloads.h), and writes reply values straight into it.
//
// The region is a sealed memfd on tmpfs (it can neither shrink nor grow, so a
// mapping of it cannot fault), created by the worker; the server opens it
// through /proc/<pid>/fd/<fd> after checking, without opening it, that it is
// a memfd of ours on tmpfs, then checks the seals, the size (the model's)
// and the 64-bit key in the header, which only the worker and the servers it
// talks to know. Servers accept it only from a peer on a loopback address.
//
//   // Worker:
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<SharedRegion> r,
//                       SharedRegion::Create(total_elements * 4));
//   std::memcpy(r->push_area() + 4 * chunk.flat_offset, grad, bytes);
//   // ... send the request with r->ref() ...
//   // Server:
//   DP_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> m, cache.Get(ref));
//   DP_ASSIGN_OR_RETURN(absl::string_view g, m->Read(ref.push_offset, off, n));
//
// Thread-safety: SharedRegion and MappedRegion are immutable after creation
// (the bytes they map are the callers' to coordinate); SharedRegionCache is
// thread-safe.
#ifndef DOWNPOUR_RPC_SHARED_MEMORY_H_
#define DOWNPOUR_RPC_SHARED_MEMORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rpc/shared_calls.h"
#include "rpc/wire.h"

namespace downpour {

// Bytes before the push area; the areas start on cache lines.
inline constexpr uint64_t kSharedHeaderBytes = 4096;
// At most this many call blocks in a region.
inline constexpr int kMaxCallShards = 1024;

// The worker's region, unmapped and closed on destruction.
class SharedRegion {
 public:
  // A region whose push and reply areas hold area_bytes each (> 0), with
  // call blocks for shards 0 .. call_shards - 1 (0: none).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(
      int64_t area_bytes, int call_shards = 0);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* push_area() const { return base_ + ref_.push_offset; }
  const char* reply_area() const { return base_ + ref_.reply_offset; }
  // Bytes in each area (at least what Create was asked for).
  int64_t area_bytes() const {
    return static_cast<int64_t>(ref_.reply_offset - ref_.push_offset);
  }
  // What a request says about the region.
  const wire::SharedRef& ref() const { return ref_; }
  // Whether `ref` has the size and areas Create(area_bytes, call_shards)
  // gives a region: a server takes only regions the size of its model.
  static bool Fits(const wire::SharedRef& ref, int64_t area_bytes,
                   int call_shards = 0);

  int call_shards() const { return call_shards_; }
  // Shard `shard`'s call block; null when the region has none for it.
  ShardCalls* shard_calls(int shard) const;
  std::atomic<uint32_t>* client_bell() const;

 private:
  SharedRegion(char* base, const wire::SharedRef& ref, int call_shards)
      : base_(base), ref_(ref), call_shards_(call_shards) {}
  char* const base_;
  const wire::SharedRef ref_;
  const int call_shards_;
};

// A worker's region as a server maps it; unmapped when the last reference
// goes.
class MappedRegion {
 public:
  // FailedPrecondition saying what does not match, for a ref that does not
  // name a sealed memfd of ours with that size and key.
  static absl::StatusOr<std::shared_ptr<MappedRegion>> Open(
      const wire::SharedRef& ref);
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  // `bytes` bytes at area + offset, for an area (push_offset or
  // reply_offset) the ref gave; InvalidArgument when they do not lie
  // inside the region after its header.
  absl::StatusOr<absl::string_view> Read(uint64_t area, int64_t offset,
                                         int64_t bytes) const;
  absl::StatusOr<char*> Write(uint64_t area, int64_t offset,
                              int64_t bytes) const;

  // Whether the worker still holds the region under the descriptor it was
  // opened by (the same memory file): once it closed it (or exited), the
  // mapping only holds memory.
  bool StillHeld(const wire::SharedRef& ref) const;

  // The call blocks the region's header declared when it was opened.
  int call_shards() const { return call_shards_; }
  ShardCalls* shard_calls(int shard) const;
  std::atomic<uint32_t>* client_bell() const;

 private:
  MappedRegion(char* base, uint64_t size, uint64_t inode, int call_shards)
      : base_(base), size_(size), inode_(inode), call_shards_(call_shards) {}
  absl::Status Check(uint64_t area, int64_t offset, int64_t bytes) const;
  char* const base_;
  const uint64_t size_;
  const uint64_t inode_;
  const int call_shards_;
};

// A server's mapped regions, by (pid, fd, key). A region stays mapped
// while its worker holds it: a new region, and any request once
// `recheck_every` has passed, drops those whose workers closed theirs or
// exited. At most `max_regions` are kept (the oldest goes first).
class SharedRegionCache {
 public:
  explicit SharedRegionCache(int max_regions = 64,
                             absl::Duration recheck_every = absl::Seconds(10))
      : max_(max_regions), recheck_every_(recheck_every) {}
  absl::StatusOr<std::shared_ptr<MappedRegion>> Get(const wire::SharedRef& ref);

 private:
  using Key = std::tuple<uint32_t, int32_t, uint64_t>;
  // Drops the regions no worker holds any more.
  void DropReleased() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const int max_;
  const absl::Duration recheck_every_;
  absl::Mutex mu_;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_check_ ABSL_GUARDED_BY(mu_) = absl::Now();
  // The region and when it was opened.
  std::map<Key, std::pair<std::shared_ptr<MappedRegion>, uint64_t>> regions_
      ABSL_GUARDED_BY(mu_);
};

// Whether a gRPC peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000",
// "unix:/path") is on this host's loopback: a string test, cheap enough for
// every request. (For a target a worker dials, rpc/credentials.h's
// IsLoopbackAddress, which resolves names.)
bool IsLoopbackPeer(absl::string_view peer);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_SHARED_MEMORY_H_
