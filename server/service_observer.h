// File: server/service_observer.h
//
// What the parameter-server service reports as it serves, for health and
// metrics (server/ps_metrics.h implements it; ps_host wires it): the first
// successful declaration, and every push with its outcome, the staleness of
// each pushed chunk and the time the store took to apply it.
//
// Thread-safety: implementations are called concurrently from gRPC's
// callback threads and must be thread-safe and cheap (no blocking).
#ifndef DOWNPOUR_SERVER_SERVICE_OBSERVER_H_
#define DOWNPOUR_SERVER_SERVICE_OBSERVER_H_

#include <cstdint>
#include <vector>

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
};

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SERVICE_OBSERVER_H_
