// ps_server: one parameter-server shard, serving gRPC until SIGINT/SIGTERM.
//
//   ps_server --port=5000 --shard_index=0 --num_shards=2 --optimizer=adagrad --lr=0.05
//
// With --port=0 a free port is chosen; --port_file receives it (written
// atomically once the server accepts calls), which is how deploy:launch and
// the integration tests find their servers.
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/command_line.h"
#include "common/process_setup.h"
#include "server/connection_guard.h"
#include "server/server_flags.h"
#include "server/shard_server.h"
#include "server/standby_flags.h"

namespace {

// The shard's options from its flags.
downpour::ShardServerOptions ShardServerOptionsFrom(downpour::ServerFlags f,
                                                    int64_t file_limit) {
  downpour::ShardServerOptions o;
  o.max_connections =
      f.max_connections > 0
          ? f.max_connections
          : downpour::DefaultMaxConnections(f.host.store.num_workers, file_limit);
  o.host = std::move(f.host);
  o.spec = std::move(f.spec);
  o.lr = f.lr;
  o.port_file = std::move(f.port_file);
  o.snapshots = std::move(f.snapshots);
  o.job_identity = std::move(f.job_identity);
  o.heap_trim_min_mb = f.heap_trim_min_mb;
  // Standby shards: the spec names this shard's other process.
  if (o.spec.has_value() && !o.spec->ps_standby.empty()) {
    const int k = o.spec->task_index;
    o.standby_task = o.spec->standby;
    o.replica_peer = o.standby_task ? o.spec->ps[k] : o.spec->ps_standby[k];
  }
  return o;
}

// Says why the shard could not start; returns the exit code: 1 when it
// could not listen or write its port file (Unavailable), else 2 (a bad
// flag, or a checkpoint folder of another job or not writable).
int ReportStartFailure(const absl::Status& status) {
  const bool unavailable = status.code() == absl::StatusCode::kUnavailable;
  std::fprintf(stderr, "ps_server: %s\n", std::string(status.message()).c_str());
  if (status.code() == absl::StatusCode::kCancelled) return 0;  // A signal.
  return unavailable ? 1 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour parameter-server shard. See README.md for the flags.");
  downpour::ParseCommandLineOrExit(argc, argv);  // --help: 0; a bad flag: 2.
  downpour::SetUpProcess();
  // Many connections must not run the process out of descriptors, after
  // which gRPC stops accepting (server/connection_guard.h).
  const int64_t file_limit = downpour::RaiseFileLimit();
  absl::StatusOr<downpour::ServerFlags> flags = downpour::ReadServerFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "ps_server: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  // Before the shard starts, so that a signal from then on stops it
  // gracefully (drained, final snapshot).
  absl::StatusOr<std::unique_ptr<downpour::StopSignal>> stop =
      downpour::StopSignal::Install();
  if (!stop.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", stop.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<absl::Duration> lease = downpour::StandbyLeaseFromFlags();
  if (!lease.ok()) {
    std::fprintf(stderr, "ps_server: %s\n",
                 std::string(lease.status().message()).c_str());
    return 2;
  }
  downpour::ShardServerOptions options =
      ShardServerOptionsFrom(*std::move(flags), file_limit);
  options.standby_lease = *lease;
  options.stop = &(*stop)->stopped();
  absl::StatusOr<std::unique_ptr<downpour::ShardServer>> server =
      downpour::ShardServer::Create(std::move(options));
  if (!server.ok()) return ReportStartFailure(server.status());
  return (*server)->Run((*stop)->stopped());
}
