// GrpcClientOptions' checks (worker/grpc_ps_client.h), apart from the client.
#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_config.h"
#include "worker/grpc_ps_client.h"

namespace downpour {

absl::Status CheckGrpcClientOptions(const GrpcClientOptions& options) {
  if (options.hosts.empty()) {
    return absl::InvalidArgumentError("no parameter-server addresses given");
  }
  if (!options.standby_hosts.empty() &&
      options.standby_hosts.size() != options.hosts.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.standby_hosts.size(), " standby addresses for ",
        options.hosts.size(), " shards; one standby per shard"));
  }
  for (const std::string& h : options.standby_hosts) {
    if (h.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("standby address '", h, "' is not host:port"));
    }
  }
  for (const std::string& h : options.hosts) {
    if (h.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", h, "' is not host:port"));
    }
  }
  if (options.worker_id < 0 || options.max_attempts < 1) {
    return absl::InvalidArgumentError("worker_id must be >= 0, max_attempts >= 1");
  }
  if (options.part_bytes < 4096 ||
      options.part_bytes > kMaxMessageBytes / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "part_bytes must be in [4096, ", kMaxMessageBytes / 2, "], got ",
        options.part_bytes));
  }
  if (options.max_calls_in_flight_per_connection < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_calls_in_flight_per_connection must be >= -1 (0: no limit, -1: "
        "sized from measured throughput), got ",
        options.max_calls_in_flight_per_connection));
  }
  if (options.connections_per_shard < 0 || options.connections_per_shard > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connections_per_shard must be in [0, 64] (0: auto), got ",
        options.connections_per_shard));
  }
  return absl::OkStatus();
}

}  // namespace downpour
