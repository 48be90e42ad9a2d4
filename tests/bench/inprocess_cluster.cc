#include "tests/bench/inprocess_cluster.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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
  cluster->num_addresses_ = options.num_addresses;
  for (int s = 0; s < options.num_shards; ++s) {
    ParameterServerHostOptions host_options;
    host_options.store.shard_index = s;
    host_options.store.num_shards = options.num_shards;
    host_options.store.optimizer = options.optimizer;
    host_options.security = options.security;
    host_options.listen_addresses.clear();
    for (int a = 0; a < options.num_addresses; ++a) {
      host_options.listen_addresses.push_back(
          absl::StrCat("127.0.0.", a + 1, ":0"));
    }
    absl::StatusOr<std::unique_ptr<ParameterServerHost>> host =
        ParameterServerHost::Create(host_options);
    if (!host.ok()) {
      return absl::Status(host.status().code(),
                          absl::StrCat("shard ", s, ": ", host.status().message()));
    }
    cluster->shards_.push_back(*std::move(host));
  }
  return cluster;
}

InProcessCluster::~InProcessCluster() {
  // Every server stops taking calls first; each host's destructor then
  // waits for its server before freeing the service and store.
  for (auto& shard : shards_) shard->Shutdown(absl::Seconds(1));
  shards_.clear();
}

std::vector<std::string> InProcessCluster::HostsForClient(int client) const {
  std::vector<std::string> hosts;
  for (const auto& shard : shards_) {
    hosts.push_back(shard->address(client % num_addresses_));
  }
  return hosts;
}

}  // namespace downpour
