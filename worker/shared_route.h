// File: worker/shared_route.h
//
// Which of a worker's shards take its payloads through shared memory
// (rpc/shared_memory.h): those on this host's loopback that can map the
// worker's region, asked once after the model is declared. The rest, and
// all of them with fp16/bf16 on the wire or a standby (whose failover may
// lead off the host), keep their payloads in the gRPC messages.
//
//   SharedAttachment a = AttachSharedMemory(transport, options, map);
//   encoder.Encode(..., a.route);   // a.region must outlive the route
//
// Thread-safety: a function, used by the client's one calling thread.
#ifndef DOWNPOUR_WORKER_SHARED_ROUTE_H_
#define DOWNPOUR_WORKER_SHARED_ROUTE_H_

#include <memory>
#include <string>
#include <vector>

#include "common/sharding.h"
#include "rpc/shared_memory.h"
#include "worker/part_messages.h"
#include "worker/shard_transport.h"
#include "worker/shared_call_client.h"

namespace downpour {

struct SharedRouteOptions {
  // GrpcClientOptions::shared_memory.
  bool enabled = true;
  // GrpcClientOptions::shared_memory_calls: pushes too (the region gets a
  // call block per shard, rpc/shared_calls.h).
  bool calls = true;
  // Shard addresses, in shard order.
  std::vector<std::string> hosts;
  bool has_standbys = false;
  // Both wire encodings are float32.
  bool float32 = true;
};

struct SharedAttachment {
  std::unique_ptr<SharedRegion> region;
  SharedRoute route;  // Points at *region.
  // Null unless a shard on this host serves calls; uses *region.
  std::unique_ptr<SharedCallClient> calls;
  // One line for the worker's log: which shards take shared memory, or why
  // none does; empty when no shard is on this host.
  std::string note;
};

// Creates the region (two areas of the model's float32 size, and call
// blocks with options.calls) and asks each loopback shard, by a GetStats
// probe, whether it maps it; a shard that does starts serving calls. Never an error:
// whatever fails leaves that shard (or every shard) on the wire, said in
// the note.
SharedAttachment AttachSharedMemory(const ShardTransport& transport,
                                    const SharedRouteOptions& options,
                                    const ShardMap& map);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SHARED_ROUTE_H_
