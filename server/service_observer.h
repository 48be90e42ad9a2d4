// File: server/service_observer.h
//
// What the parameter-server service reports as it serves, for health and
// metrics (server/ps_metrics.h implements it; ps_host wires it): the first
// successful declaration, every push with its outcome, the staleness of
// each pushed chunk and the time the store took to apply it, and the calls
// that reach the service through shared memory instead of gRPC.
//
// Thread-safety: implementations are called concurrently from gRPC's
// callback threads and must be thread-safe and cheap (no blocking).
#ifndef DOWNPOUR_SERVER_SERVICE_OBSERVER_H_
#define DOWNPOUR_SERVER_SERVICE_OBSERVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace downpour {

struct PushEvent {
  int32_t worker_id = -1;
  bool duplicate = false;
  bool dropped = false;
  // Per applied chunk: version after the push - 1 - version it was computed
  // from (0 = fresh).
  std::vector<int64_t> staleness;
  absl::Duration apply_time;
  int64_t bytes = 0;  // Gradient payload bytes received.
};

class ServiceObserver {
 public:
  virtual ~ServiceObserver() = default;
  // A DeclareModel succeeded (the shard is initialized).
  virtual void OnDeclared() = 0;
  // A push (part) was handled by the store without error.
  virtual void OnPush(const PushEvent& event) = 0;
  // A call that came through a worker's shared region rather than gRPC
  // (server/shared_call_server.h), to be counted as gRPC's calls are: the
  // method's name ("Push", "PushPull"), its status, its time, and the
  // request's and reply's bytes (payloads in the region not included).
  virtual void OnSharedCall(const char* method, absl::StatusCode code,
                            absl::Duration latency, int64_t received_bytes,
                            int64_t sent_bytes) = 0;
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SERVICE_OBSERVER_H_
