#include "tests/bench/inprocess_cluster.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "server/grpc_service.h"

namespace downpour {

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(
    const InProcessClusterOptions& options) {
  if (options.num_shards < 1 || options.num_addresses < 1 ||
      options.num_addresses > 200) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need num_shards >= 1 and 1 <= num_addresses <= 200, got ",
        options.num_shards, " and ", options.num_addresses));
  }
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster());
  cluster->shards_.resize(options.num_shards);
  for (int s = 0; s < options.num_shards; ++s) {
    Shard& shard = cluster->shards_[s];
    ParameterStoreOptions store_options;
    store_options.shard_index = s;
    store_options.num_shards = options.num_shards;
    store_options.optimizer = options.optimizer;
    DP_ASSIGN_OR_RETURN(shard.store, ParameterStore::Create(store_options));
    shard.service = NewParameterServerService(shard.store.get());

    grpc::ServerBuilder builder;
    // ServerBuilder writes each bound port through the pointer at Start.
    shard.ports.assign(options.num_addresses, 0);
    for (int a = 0; a < options.num_addresses; ++a) {
      builder.AddListeningPort(absl::StrCat("127.0.0.", a + 1, ":0"),
                               grpc::InsecureServerCredentials(),
                               &shard.ports[a]);
    }
    builder.RegisterService(shard.service.get());
    ConfigureServerBuilder(&builder);
    shard.server = builder.BuildAndStart();
    if (shard.server == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("shard ", s, ": could not start a gRPC server"));
    }
    for (int a = 0; a < options.num_addresses; ++a) {
      if (shard.ports[a] == 0) {
        return absl::UnavailableError(absl::StrCat(
            "shard ", s, ": could not listen on 127.0.0.", a + 1));
      }
    }
  }
  return cluster;
}

InProcessCluster::~InProcessCluster() {
  for (Shard& shard : shards_) {
    if (shard.server != nullptr) {
      shard.server->Shutdown(std::chrono::system_clock::now() +
                             std::chrono::seconds(1));
    }
  }
  for (Shard& shard : shards_) {
    if (shard.server != nullptr) shard.server->Wait();
    shard.server.reset();   // Before the service and store it uses.
    shard.service.reset();
    shard.store.reset();
  }
}

std::vector<std::string> InProcessCluster::HostsForClient(int client) const {
  std::vector<std::string> hosts;
  for (const Shard& shard : shards_) {
    const int a = client % static_cast<int>(shard.ports.size());
    hosts.push_back(absl::StrCat("127.0.0.", a + 1, ":", shard.ports[a]));
  }
  return hosts;
}

}  // namespace downpour
