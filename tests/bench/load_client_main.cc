// File: tests/bench/load_client_main.cc
//
// Many clients pushing large messages at one
// ps_server as fast as it answers, to show what bounds the server's memory
// (tests/bench/load_memory.sh starts the server, runs this and reads the
// server's peak resident memory).
//
//   load_client --target=127.0.0.1:PORT --clients=64 --mib=60 --seconds=20
//
// --seconds is the benchmarks' (tests/bench/bench_flags.h), --rpc_timeout_s
// ps_worker's deadline of one push (worker/transport_flags.h).
//
// Declares a one-tensor model of --mib MiB (async server, --num_workers >=
// --clients), then each client, on a channel (TCP connection) of its own,
// sends Push requests carrying the whole model's gradient (one --mib MiB
// message, zeros) back to back for --seconds. A refusal the server means as
// "back off" (UNAVAILABLE, RESOURCE_EXHAUSTED) is retried with the same seq
// after a capped exponential backoff, as a worker does; any other error ends
// the run. The payload is one shared buffer sent by reference, so the client
// stays small. Prints one line:
//   load: clients=64 mib=60 seconds=20.0 pushes_ok=N goodput_mib_s=X
//         refused=N p50_ms=X max_ms=X codes=OK:N,UNAVAILABLE:N,...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/sharding.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"
#include "rpc/grpc_config.h"
#include "rpc/wire.h"
#include "tests/bench/bench_flags.h"
#include "worker/grpc_ps_client.h"
#include "worker/transport_flags.h"

ABSL_FLAG(std::string, target, "", "host:port of the ps_server (plaintext).");
ABSL_FLAG(int, clients, 64, "Concurrent clients, one TCP connection each.");
ABSL_FLAG(int, mib, 60, "Size of the model and of each push (MiB).");
ABSL_FLAG(int, chunk_mib, 4, "max_chunk_bytes of the declared layout (MiB).");

namespace downpour {
namespace {

struct Totals {
  absl::Mutex mu;
  int64_t ok ABSL_GUARDED_BY(mu) = 0;
  int64_t refused ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, int64_t> codes ABSL_GUARDED_BY(mu);
  std::vector<double> ok_ms ABSL_GUARDED_BY(mu);
  std::string fatal ABSL_GUARDED_BY(mu);
};

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, int i) {
  grpc::ChannelArguments args;
  ConfigureChannelArguments(&args);
  // A private subchannel pool and a distinct argument: a connection each.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("downpour.load_client_index", i);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

std::string CodeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    default: return absl::StrCat("code", static_cast<int>(c));
  }
}

int Run() {
  absl::StatusOr<BenchFlags> bench = BenchFlagsFromFlags();
  GrpcClientOptions transport;
  absl::Status transport_status = TransportOptionsFromFlags(&transport);
  if (!bench.ok() || !transport_status.ok()) {
    std::fprintf(stderr, "load_client: %s\n",
                 std::string(bench.ok() ? transport_status.message()
                                        : bench.status().message())
                     .c_str());
    return 2;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  const int clients = absl::GetFlag(FLAGS_clients);
  const int64_t bytes = int64_t{absl::GetFlag(FLAGS_mib)} << 20;
  const absl::Duration run_for = absl::Seconds(bench->seconds);
  const absl::Duration rpc_timeout = transport.rpc_timeout;
  if (target.empty() || clients <= 0 || bytes <= 0 ||
      absl::GetFlag(FLAGS_chunk_mib) <= 0) {
    std::fprintf(stderr, "load_client: --target is required; --clients, "
                         "--mib and --chunk_mib must be positive\n");
    return 2;
  }

  ModelLayout layout;
  layout.tensors = {TensorSpec{"w", {bytes / 4}}};
  layout.num_shards = 1;
  layout.max_chunk_bytes = int64_t{absl::GetFlag(FLAGS_chunk_mib)} << 20;
  absl::StatusOr<ShardMap> map = ComputeShardMap(layout);
  if (!map.ok()) {
    std::fprintf(stderr, "load_client: %s\n", map.status().ToString().c_str());
    return 2;
  }
  const std::vector<char> zeros(static_cast<size_t>(layout.max_chunk_bytes), 0);

  // Declare (every client would send the same; one is enough).
  {
    proto::DeclareModelRequest req;
    proto::ModelLayout* l = req.mutable_layout();
    proto::TensorSpec* t = l->add_tensors();
    t->set_name("w");
    t->add_shape(bytes / 4);
    l->set_max_chunk_bytes(layout.max_chunk_bytes);
    l->set_num_shards(1);
    l->set_spread_min_bytes(layout.spread_min_bytes);
    for (const Chunk& c : map->chunks) {
      proto::ChunkValues* v = req.add_initial();
      v->set_chunk_id(c.id);
      v->set_data(zeros.data(), static_cast<size_t>(c.num_elements * 4));
    }
    auto stub = proto::ParameterServer::NewStub(NewChannel(target, -1));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ctx.set_wait_for_ready(true);
    proto::DeclareModelResponse resp;
    grpc::Status s = stub->DeclareModel(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "load_client: declare: %s: %s\n",
                   CodeName(s.error_code()).c_str(), s.error_message().c_str());
      return 1;
    }
  }

  // The chunk headers are the same in every push; payloads point at `zeros`.
  std::vector<std::string> chunk_heads;
  for (const Chunk& c : map->chunks) {
    chunk_heads.push_back(wire::ChunkHeader(wire::kPushGradientsField, c.id, 0,
                                            wire::Encoding::kRawF32,
                                            c.num_elements * 4));
  }

  Totals totals;
  const absl::Time start = absl::Now();
  const absl::Time stop = start + run_for;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      grpc::GenericStub stub(NewChannel(target, i));
      int64_t seq = 1;
      int backoff_step = 0;
      while (absl::Now() < stop) {
        std::vector<grpc::Slice> slices;
        wire::PushHead head;
        head.worker_id = i;
        head.seq = seq;
        std::string h;
        wire::AppendPushHead(head, &h);
        slices.emplace_back(h);
        for (size_t c = 0; c < map->chunks.size(); ++c) {
          slices.emplace_back(chunk_heads[c]);
          slices.emplace_back(zeros.data(),
                              static_cast<size_t>(map->chunks[c].num_elements * 4),
                              grpc::Slice::STATIC_SLICE);
        }
        grpc::ByteBuffer req(slices.data(), slices.size());
        grpc::ByteBuffer resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout));
        absl::Notification done;
        grpc::Status status;
        const absl::Time t0 = absl::Now();
        stub.UnaryCall(&ctx, kPushMethod, grpc::StubOptions(), &req, &resp,
                       [&](grpc::Status s) {
                         status = std::move(s);
                         done.Notify();
                       });
        done.WaitForNotification();
        const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
        const bool back_off =
            status.error_code() == grpc::StatusCode::UNAVAILABLE ||
            status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
        {
          absl::MutexLock l(&totals.mu);
          if (++totals.codes[CodeName(status.error_code())] == 1 &&
              !status.ok()) {
            std::fprintf(stderr, "load_client: first %s: %s\n",
                         CodeName(status.error_code()).c_str(),
                         status.error_message().c_str());
          }
          if (status.ok()) {
            ++totals.ok;
            totals.ok_ms.push_back(ms);
          } else if (back_off) {
            ++totals.refused;
          } else if (totals.fatal.empty()) {
            totals.fatal = absl::StrCat(CodeName(status.error_code()), ": ",
                                        status.error_message());
          }
        }
        if (status.ok()) {
          ++seq;
          backoff_step = 0;
        } else if (back_off) {
          // As a worker: 100 ms doubling, at most 2 s.
          absl::SleepFor(std::min(absl::Milliseconds(100) * (1 << backoff_step),
                                  absl::Seconds(2)));
          backoff_step = std::min(backoff_step + 1, 5);
        } else {
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);

  absl::MutexLock l(&totals.mu);
  std::sort(totals.ok_ms.begin(), totals.ok_ms.end());
  const double p50 = totals.ok_ms.empty() ? 0 : totals.ok_ms[totals.ok_ms.size() / 2];
  const double max = totals.ok_ms.empty() ? 0 : totals.ok_ms.back();
  std::string codes;
  for (const auto& [name, n] : totals.codes) {
    absl::StrAppend(&codes, codes.empty() ? "" : ",", name, ":", n);
  }
  std::printf(
      "load: clients=%d mib=%lld seconds=%.1f pushes_ok=%lld "
      "goodput_mib_s=%.1f refused=%lld p50_ms=%.0f max_ms=%.0f codes=%s\n",
      clients, static_cast<long long>(bytes >> 20), secs,
      static_cast<long long>(totals.ok),
      static_cast<double>(totals.ok) * static_cast<double>(bytes >> 20) / secs,
      static_cast<long long>(totals.refused), p50, max, codes.c_str());
  if (!totals.fatal.empty()) {
    std::fprintf(stderr, "load_client: a push failed: %s\n", totals.fatal.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return downpour::Run();
}
