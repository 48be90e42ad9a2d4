// File: tests/bench/inprocess_cluster.h
//
// S real parameter-server shards inside the calling process, for benchmarks:
// each shard is a ParameterServerHost (server/ps_host.h: a ParameterStore
// behind the gRPC service on a real grpc::Server) listening on loopback TCP,
// so a client built with
// NewGrpcParameterClient goes through the full gRPC stack (HTTP/2 framing,
// protobuf serialization, the kernel's TCP) exactly as with ps_server
// processes, without needing the ps_server binary.
//
// gRPC shares one subchannel (one TCP connection) between channels of the
// same process that resolve to the same address with the same arguments. To
// give each simulated worker its own connections, as separate worker
// processes would have, every shard can listen on several loopback addresses
// (127.0.0.1, 127.0.0.2, ...) and HostsForClient(c) hands client c its own.
//
//   InProcessClusterOptions o;
//   o.num_shards = 2;
//   o.num_addresses = 4;
//   DP_ASSIGN_OR_RETURN(auto cluster, InProcessCluster::Start(o));
//   client_options.hosts = cluster->HostsForClient(worker_index);
//
// Thread-safety: HostsForClient and store may be called from any thread; the
// destructor shuts every server down (callers' clients must be done).
#ifndef DOWNPOUR_TESTS_BENCH_INPROCESS_CLUSTER_H_
#define DOWNPOUR_TESTS_BENCH_INPROCESS_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/optimizer.h"
#include "server/parameter_store.h"
#include "server/ps_host.h"
#include "rpc/credentials.h"

namespace downpour {

struct InProcessClusterOptions {
  int num_shards = 1;
  OptimizerOptions optimizer;
  // Loopback addresses 127.0.0.1 .. 127.0.0.<num_addresses> each shard
  // listens on (one port per address); 1 <= num_addresses <= 200.
  int num_addresses = 1;
  // TLS / token of every shard (the certificate
  // must cover 127.0.0.1..num_addresses; make_certs.sh's covers 127.0.0.1).
  TransportSecurityOptions security;
};

class InProcessCluster {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(
      const InProcessClusterOptions& options);
  // Shuts every server down (short grace period) and frees the stores.
  ~InProcessCluster();

  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // "127.0.0.<k>:port" of shard 0, 1, ... where k = client % num_addresses + 1.
  std::vector<std::string> HostsForClient(int client) const;
  ParameterStore* store(int shard) const { return shards_[shard]->store(); }

 private:
  InProcessCluster() = default;

  int num_addresses_ = 1;
  std::vector<std::unique_ptr<ParameterServerHost>> shards_;
};

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_INPROCESS_CLUSTER_H_
