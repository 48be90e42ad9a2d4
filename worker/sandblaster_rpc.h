// File: worker/sandblaster_rpc.h
//
// The gRPC side of Sandblaster in a worker (proto/sandblaster.proto):
//
//  * SandblasterShards: the shards' SandblasterShard services: runs a
//    vector program on every shard (a ShardVectorOps, the dots summed),
//    pushes a worker's accumulated gradient cut into each shard's slice,
//    and registers / finds the chief's coordinator (kept by the shards, so
//    a job started by launch, by hand, TF_CONFIG or Slurm finds it alike);
//  * CoordinatorServer: the chief's coordinator, serving a PortionTable
//    (worker/sandblaster_portions.h) on its own port, with the shards'
//    rules: its address checked (CheckListenAddressIsSafe), the token
//    checked from the headers (rpc/server_auth.h), and a request for
//    worker k taken only from a caller that may act for it
//    (rpc/peer_identity.h);
//  * WorkSource: how a worker asks for work, in process (the chief) or
//    over gRPC.
//
// Thread-safety: SandblasterShards and the work sources may be used from
// several threads; the coordinator serves on gRPC's threads.
#ifndef DOWNPOUR_WORKER_SANDBLASTER_RPC_H_
#define DOWNPOUR_WORKER_SANDBLASTER_RPC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/sharding.h"
#include "rpc/credentials.h"
#include "worker/sandblaster_lbfgs.h"
#include "worker/sandblaster_portions.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace downpour {

class SandblasterShards final : public ShardVectorOps {
 public:
  static absl::StatusOr<std::unique_ptr<SandblasterShards>> Create(
      const std::vector<std::string>& ps_hosts,
      const TransportSecurityOptions& security, absl::Duration rpc_timeout);
  ~SandblasterShards() override;

  absl::StatusOr<std::vector<double>> Run(
      const std::vector<VectorOp>& program) override;
  // `grad`: the whole flat model; shard s gets its chunks of `map`.
  absl::Status Accumulate(int64_t eval, int32_t worker,
                          absl::Span<const float> grad, const ShardMap& map);
  absl::Status SetCoordinator(const std::string& address);
  // Bytes of the vector programs sent to the shards and of their answers
  // (protobuf payloads, summed over the shards): the coordinator's traffic.
  int64_t program_bytes_sent() const { return sent_.load(); }
  int64_t program_bytes_received() const { return received_.load(); }
  // Asks shard 0 until an address is registered (Unavailable after
  // `timeout`). `stale`: an address to wait past (a dead coordinator's).
  absl::StatusOr<std::string> FindCoordinator(absl::Duration timeout,
                                              const std::string& stale = "");

 private:
  struct Stubs;
  SandblasterShards(std::unique_ptr<Stubs> stubs, absl::Duration timeout);
  std::unique_ptr<Stubs> stubs_;
  const absl::Duration timeout_;
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> received_{0};
};

class WorkSource {
 public:
  virtual ~WorkSource() = default;
  virtual absl::StatusOr<WorkOrder> GetWork(const WorkReport& report) = 0;
};

// The chief's own worker: calls the table directly. `table` not owned.
std::unique_ptr<WorkSource> LocalWorkSource(PortionTable* table);

// Another worker: the coordinator at `address`. A call that fails for
// want of the coordinator (unavailable, deadline) is retried for
// `patience`, then Unavailable naming the coordinator; a refused one
// (permission, a bad report) fails at once with its code.
absl::StatusOr<std::unique_ptr<WorkSource>> RemoteWorkSource(
    const std::string& address, const TransportSecurityOptions& security,
    absl::Duration patience);

class CoordinatorServer {
 public:
  // Serves `table` (not owned, must outlive the server) on `listen`
  // ("host:port", port 0: a free one).
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      PortionTable* table, const std::string& listen,
      const TransportSecurityOptions& security);
  ~CoordinatorServer();
  // "host:port" with the bound port.
  const std::string& address() const { return address_; }

 private:
  CoordinatorServer() = default;
  std::unique_ptr<class CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SANDBLASTER_RPC_H_
