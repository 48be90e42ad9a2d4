// File: server/standby_shard.h
//
// What a shard process with a standby (server/replication.h) needs around
// its ParameterStore: the ReplicaShard that applies forwarded changes
// (server/grpc_service.h's ApplyForwardedChange), exports the shard's state
// for a joining standby and imports it (the snapshot file format,
// server/shard_snapshot.h, through a private temporary folder), and the
// start-up decision of which role a process takes.
//
//   DP_ASSIGN_OR_RETURN(ReplicaRole role,
//                       DecideStartRole(peer.get(), standby_task, 300s, log));
//   ReplicaShard shard = StoreReplicaShard([&] { return store_ptr.load(); });
//
// Thread-safety: the functions of a ReplicaShard may be called from any
// thread; DecideStartRole blocks its caller.
#ifndef DOWNPOUR_SERVER_STANDBY_SHARD_H_
#define DOWNPOUR_SERVER_STANDBY_SHARD_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/parameter_store.h"
#include "server/replication.h"

namespace downpour {

// `store` returns the shard's store, or null while it is not built yet
// (the functions then answer UNAVAILABLE).
ReplicaShard StoreReplicaShard(std::function<ParameterStore*()> store);

// The role a starting process takes, asking its peer (polled every 100
// ms):
//  * the peer is a primary: standby (it joins the primary);
//  * the peer is a standby holding a primary's state, or fenced: wait (it
//    is about to take over, or this process's old self was its primary);
//  * the peer is starting, a standby that never joined, or nobody listens
//    at its address: primary for the shard's primary task, wait for the
//    standby task;
//  * the peer does not answer at all (a partition): wait.
// UNAVAILABLE after `give_up` of waiting; CANCELLED within about 100 ms
// once `stop` (may be null) is notified, naming what it waited for. `log`
// hears what it waits for (once per reason).
absl::StatusOr<ReplicaRole> DecideStartRole(
    ReplicaPeer* peer, bool standby_task, absl::Duration give_up,
    const std::function<void(const std::string&)>& log,
    const absl::Notification* stop = nullptr);

// The checkpoint folder of the shard's other process, by launch's naming
// (deploy/cluster_plan.h): ".../shard<k>" and ".../standby<k>" are each
// other's. Empty when `dir` is named otherwise.
std::string PeerCheckpointDir(const std::string& dir, int shard_index);

// Of `dir` and `peer_dir` (may be empty), the folder whose newest readable
// snapshot of the shard is the newer (higher step, then written later):
// a primary starting with no peer restores from there, since after a
// failover the promoted standby's snapshots are the shard's newest. `dir`
// when the peer's folder has none. `log` says when it is the peer's.
std::string NewerCheckpointDir(const std::string& dir,
                               const std::string& peer_dir, int shard_index,
                               int num_shards,
                               const std::function<void(const std::string&)>& log);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STANDBY_SHARD_H_
