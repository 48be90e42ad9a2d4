#include "worker/transport_flags.h"

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/flag_args.h"
#include "common/status_macros.h"
#include "rpc/wire.h"

ABSL_FLAG(int64_t, part_kb, 1024, "Largest payload of one pull/push call, KiB.");
ABSL_FLAG(int, connections_per_shard, 0,
          "TCP connections to each shard; 0: 2 for a single shard, else 1.");
ABSL_FLAG(int, calls_in_flight, -1,
          "Calls in flight per connection (0: no limit; -1: start at 1 and "
          "size it from measured throughput, worker/adaptive_window.h).");
ABSL_FLAG(std::string, push_dtype, "f32",
          "Gradient encoding on the wire: f32, fp16 or bf16.");
ABSL_FLAG(std::string, pull_dtype, "f32",
          "Parameter encoding on the wire: f32, fp16 or bf16.");
ABSL_FLAG(double, rpc_timeout_s, 60, "Deadline of one pull or push.");
ABSL_FLAG(double, connect_timeout_s, 60, "How long to wait for the servers.");
ABSL_FLAG(double, reconnect_timeout_s, 120,
          "Keep retrying an unreachable shard this long (backoff up to 2 s) "
          "before failing, so a restarted shard is picked up again.");
ABSL_FLAG(int64_t, max_chunk_bytes, 1 << 20, "Largest parameter chunk.");
ABSL_FLAG(bool, shared_memory, downpour::GrpcClientOptions{}.shared_memory,
          "Payloads to shards on this host's loopback go through shared "
          "memory (float32, no standbys); gRPC carries the rest of each call.");
ABSL_FLAG(bool, shared_memory_calls,
          downpour::GrpcClientOptions{}.shared_memory_calls,
          "With --shared_memory: pushes to those shards go through the shared "
          "memory too, as calls woken by futexes instead of gRPC.");

namespace downpour {

absl::Status TransportOptionsFromFlags(GrpcClientOptions* client) {
  client->part_bytes = absl::GetFlag(FLAGS_part_kb) << 10;
  client->connections_per_shard = absl::GetFlag(FLAGS_connections_per_shard);
  client->max_calls_in_flight_per_connection =
      absl::GetFlag(FLAGS_calls_in_flight);
  DP_ASSIGN_OR_RETURN(client->push_encoding,
                      wire::ParseEncoding(absl::GetFlag(FLAGS_push_dtype)));
  DP_ASSIGN_OR_RETURN(client->pull_encoding,
                      wire::ParseEncoding(absl::GetFlag(FLAGS_pull_dtype)));
  client->rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  client->connect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  client->reconnect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_reconnect_timeout_s));
  client->shared_memory = absl::GetFlag(FLAGS_shared_memory);
  client->shared_memory_calls = absl::GetFlag(FLAGS_shared_memory_calls);
  return absl::OkStatus();
}

int64_t MaxChunkBytesFromFlags() { return absl::GetFlag(FLAGS_max_chunk_bytes); }

std::vector<std::string> GivenTransportFlagArgs() {
  return GivenFlagArgs({"part_kb", "connections_per_shard", "calls_in_flight",
                        "push_dtype", "pull_dtype", "rpc_timeout_s",
                        "connect_timeout_s", "reconnect_timeout_s",
                        "max_chunk_bytes", "shared_memory",
                        "shared_memory_calls"});
}

}  // namespace downpour
