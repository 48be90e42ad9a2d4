// File: common/incarnation.h
//
// Incarnation numbers. A server process (server/grpc_service.cc)
// and each worker client (worker/grpc_ps_client.cc, one per worker process
// and worker id) draw one at start-up and send it with every push or reply,
// so that the other side can tell a restarted peer (a new sequence) from a
// late message or retry of the old one (proto/parameter_server.proto,
// `incarnation` and `server_incarnation`). Zero is what an old peer that
// sends none reads as, so a drawn value is never zero.
//
// Thread-safety: may be called from any thread.
#ifndef DOWNPOUR_COMMON_INCARNATION_H_
#define DOWNPOUR_COMMON_INCARNATION_H_

#include <cstdint>

namespace downpour {

// A random nonzero 64-bit number (std::random_device mixed with the clock),
// different for each call with overwhelming probability.
uint64_t NewIncarnation();

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_INCARNATION_H_
