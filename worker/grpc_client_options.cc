// GrpcClientOptions' checks (worker/grpc_ps_client.h) and what the client's
// pieces take from them, apart from the client.
#include "worker/grpc_client_options.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rpc/grpc_config.h"

namespace downpour {

ShardTransportOptions TransportOptions(const GrpcClientOptions& o) {
  ShardTransportOptions t;
  t.hosts = o.hosts;
  t.standby_hosts = o.standby_hosts;
  t.connections_per_shard = o.connections_per_shard > 0
                                ? o.connections_per_shard
                                : (o.hosts.size() == 1 ? 2 : 1);
  t.max_calls_in_flight_per_connection = o.max_calls_in_flight_per_connection;
  t.rpc_timeout = o.rpc_timeout;
  t.retry.max_attempts = o.max_attempts;
  t.retry.reconnect_timeout = o.reconnect_timeout;
  if (!o.standby_hosts.empty()) {
    // A failover takes a lease at most (server/replication.h): retry often,
    // and for long enough.
    t.retry.max_backoff = absl::Milliseconds(50);
    t.retry.reconnect_timeout =
        std::max(o.reconnect_timeout, absl::Seconds(30));
  }
  return t;
}

SharedRouteOptions SharedRouteOptionsFor(const GrpcClientOptions& o) {
  SharedRouteOptions r;
  r.enabled = o.shared_memory;
  r.calls = o.shared_memory_calls;
  r.hosts = o.hosts;
  r.has_standbys = !o.standby_hosts.empty();
  r.float32 = o.push_encoding == wire::Encoding::kRawF32 &&
              o.pull_encoding == wire::Encoding::kRawF32;
  return r;
}

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

absl::StatusOr<ClientSecurity> CheckedSecurity(const GrpcClientOptions& o) {
  DP_RETURN_IF_ERROR(CheckGrpcClientOptions(o));
  DP_ASSIGN_OR_RETURN(ClientSecurity security, BuildClientSecurity(o.security));
  for (const auto* hosts : {&o.hosts, &o.standby_hosts}) {
    for (const std::string& host : *hosts) {
      DP_RETURN_IF_ERROR(
          CheckTargetIsSafe(host, security.tls, security.allow_insecure));
    }
  }
  return security;
}

}  // namespace downpour
