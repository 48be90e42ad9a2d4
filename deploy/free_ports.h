// File: deploy/free_ports.h
//
// Free TCP ports on the loopback interface, for a launch whose addresses
// must all be known before any process starts (a cluster spec names every
// task: launch --standby). Each port is bound, all are read, then all are
// released, so the ports differ; a process that binds one later may still
// lose it to another program in between (the child then fails to listen
// and says so).
//
//   DP_ASSIGN_OR_RETURN(std::vector<int> ports, FreeLoopbackPorts(5));
#ifndef DOWNPOUR_DEPLOY_FREE_PORTS_H_
#define DOWNPOUR_DEPLOY_FREE_PORTS_H_

#include <vector>

#include "absl/status/statusor.h"

namespace downpour {

// `n` distinct free ports of 127.0.0.1. Unavailable when a socket cannot be
// bound (naming errno).
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n);

}  // namespace downpour

#endif  // DOWNPOUR_DEPLOY_FREE_PORTS_H_
