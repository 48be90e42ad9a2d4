// ps_server: one parameter-server shard, serving gRPC until SIGINT/SIGTERM.
//
//   ps_server --port=5000 --shard_index=0 --num_shards=2 --optimizer=adagrad --lr=0.05
//
// With --port=0 a free port is chosen; --port_file receives it (written
// atomically once the server accepts calls), which is how deploy:launch and
// the integration tests find their servers.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "common/malloc_tuning.h"
#include "server/grpc_service.h"
#include "server/parameter_store.h"

ABSL_FLAG(int, port, 0, "TCP port to listen on; 0 picks a free one.");
ABSL_FLAG(std::string, bind, "127.0.0.1",
          "Address to bind. Use 0.0.0.0 to serve workers on other hosts.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once serving.");
ABSL_FLAG(int, shard_index, 0, "This server's shard, 0 <= index < num_shards.");
ABSL_FLAG(int, num_shards, 1, "Number of parameter-server shards in the job.");
ABSL_FLAG(std::string, optimizer, "adagrad",
          "Server-side optimizer: sgd, momentum or adagrad.");
ABSL_FLAG(double, lr, 0.05, "Learning rate of the server-side optimizer.");
ABSL_FLAG(double, momentum, 0.9, "Momentum coefficient (--optimizer=momentum).");
ABSL_FLAG(double, adagrad_initial_accumulator, 0.1,
          "Initial Adagrad accumulator (--optimizer=adagrad).");
ABSL_FLAG(std::string, mode, "async",
          "async (Downpour), sync (mean of the step's gradients), or ssp "
          "(stale-synchronous, bounded by --staleness).");
ABSL_FLAG(int, num_workers, 0, "Workers in the job (required for sync/ssp).");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "Sync: gradients per step (0: all workers); fewer gives backup workers.");
ABSL_FLAG(int, staleness, 0, "Ssp: clocks a worker may run ahead of the slowest.");
ABSL_FLAG(bool, staleness_aware, false,
          "Async: divide each update's step by its staleness.");
ABSL_FLAG(int64_t, drop_stale_threshold, 0,
          "Async: drop updates staler than this (0: never).");
ABSL_FLAG(double, sync_timeout_s, 30,
          "Sync/ssp: seconds to wait for a missing worker before going on "
          "without it.");
ABSL_FLAG(int, debug_drop_reply_every, 0,
          "Testing only: replace every Nth Pull/Push/PushPull reply, after "
          "it took effect, by UNAVAILABLE (a reply lost on the network).");
ABSL_FLAG(int, min_replicas, 1,
          "Sync/ssp: fewest workers to go on with; below it the job aborts.");

namespace {

absl::Notification* g_stop = nullptr;  // Set only in main, for the handler.

void HandleSignal(int) {
  // Notify() is not async-signal-safe in general; a self-pipe would be, but
  // the only other thread touching it waits on it. Keep the handler minimal.
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    if (!f.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Downpour parameter-server shard. See README.md for the flags.");
  absl::ParseCommandLine(argc, argv);
  downpour::TuneMallocForLargeBuffers();
  // Debian's abseil is built with deadlock detection on: a lock-order graph
  // update on every Mutex acquisition (~1% of the transport's CPU). Tests
  // keep it; the binaries turn it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  downpour::ParameterStoreOptions options;
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.optimizer.name = absl::GetFlag(FLAGS_optimizer);
  options.optimizer.learning_rate = static_cast<float>(absl::GetFlag(FLAGS_lr));
  options.optimizer.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  options.optimizer.adagrad_initial_accumulator =
      static_cast<float>(absl::GetFlag(FLAGS_adagrad_initial_accumulator));
  auto mode = downpour::ParseTrainMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) {
    std::fprintf(stderr, "ps_server: --mode: %s\n", mode.status().ToString().c_str());
    return 2;
  }
  options.mode = *mode;
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  options.staleness = absl::GetFlag(FLAGS_staleness);
  options.staleness_aware = absl::GetFlag(FLAGS_staleness_aware);
  options.drop_stale_threshold = absl::GetFlag(FLAGS_drop_stale_threshold);
  options.sync_timeout = absl::Seconds(absl::GetFlag(FLAGS_sync_timeout_s));
  options.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) {
    std::fprintf(stderr, "ps_server: --port must be in [0, 65535], got %d\n", port);
    return 2;
  }

  auto store = downpour::ParameterStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", store.status().ToString().c_str());
    return 2;
  }
  downpour::ServiceOptions service_options;
  service_options.debug_drop_reply_every =
      absl::GetFlag(FLAGS_debug_drop_reply_every);
  if (service_options.debug_drop_reply_every < 0) {
    std::fprintf(stderr, "ps_server: --debug_drop_reply_every must be >= 0\n");
    return 2;
  }
  std::unique_ptr<grpc::Service> service =
      downpour::NewParameterServerService(store->get(), service_options);

  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_bind), ":", port);
  int bound_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(service.get());
  downpour::ConfigureServerBuilder(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    std::fprintf(stderr, "ps_server: could not listen on %s\n", address.c_str());
    return 1;
  }
  std::printf("ps_server: shard %d of %d (%s mode, %s, lr %g) listening on %s:%d\n",
              options.shard_index, options.num_shards,
              downpour::TrainModeName(options.mode),
              options.optimizer.name.c_str(), options.optimizer.learning_rate,
              absl::GetFlag(FLAGS_bind).c_str(), bound_port);
  std::fflush(stdout);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, bound_port)) {
    std::fprintf(stderr, "ps_server: could not write --port_file %s\n",
                 port_file.c_str());
    server->Shutdown();
    return 1;
  }

  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGINT, HandleSignal);
  std::signal(SIGTERM, HandleSignal);
  stop.WaitForNotification();

  // Finish pulls waiting on a sync step first: gRPC waits for every call.
  (*store)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  const downpour::ShardStats stats = (*store)->Stats();
  std::printf("ps_server: shard %d stopped: %s\n", options.shard_index,
              downpour::ShardStatsToJson(stats).c_str());
  return 0;
}
