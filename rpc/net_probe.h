// File: rpc/net_probe.h
//
// Small socket-level checks that turn gRPC's silent failures into messages a
// user can act on:
//
//  * ProbeListen("198.18.0.7:2222"): why an address cannot be listened on
//    (gRPC's BuildAndStart only says that it failed): "Cannot assign
//    requested address" for an address that is not this host's, "Address
//    already in use", a name that does not resolve.
//  * WaitForHostNames({"ps-0.svc:2222", ...}, 60 s): Kubernetes pods' DNS
//    names exist only once the pods do; workers retry resolving each name
//    until it resolves or the time is up, then name the one that did not.
//
// Both use getaddrinfo; thread-safe; no state.
#ifndef DOWNPOUR_RPC_NET_PROBE_H_
#define DOWNPOUR_RPC_NET_PROBE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace downpour {

// Tries to bind a TCP socket to `host_port` ("host:port", "[v6]:port",
// "0.0.0.0:0") and closes it again. OK when that works; otherwise
// Unavailable "cannot listen on <host_port>: <reason>". A bad entry is
// InvalidArgument.
absl::Status ProbeListen(const std::string& host_port);

// Resolves the host of every "host:port" entry, retrying every
// `retry_every` until all resolve or `timeout` has passed since the call.
// Each host that does not resolve at the first try is reported once to
// `log` (may be null). DeadlineExceeded naming the first unresolved entry
// and the resolver's reason.
absl::Status WaitForHostNames(const std::vector<std::string>& host_ports,
                              absl::Duration timeout,
                              const std::function<void(const std::string&)>& log,
                              absl::Duration retry_every = absl::Milliseconds(500));

}  // namespace downpour

#endif  // DOWNPOUR_RPC_NET_PROBE_H_
