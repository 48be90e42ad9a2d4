// File: worker/transport_flags.h
//
// How a worker talks to its servers, defined once for ps_worker, the
// launcher (which passes the given ones on) and the transport benchmarks:
// call sizes, connections, calls in flight, wire encodings, deadlines and
// the largest parameter chunk. Only a main calls these functions.
#ifndef DOWNPOUR_WORKER_TRANSPORT_FLAGS_H_
#define DOWNPOUR_WORKER_TRANSPORT_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/grpc_ps_client.h"

namespace downpour {

// Fills the transport fields of *client (part size, connections, calls in
// flight, encodings, deadlines); InvalidArgument for a bad encoding.
absl::Status TransportOptionsFromFlags(GrpcClientOptions* client);

// --max_chunk_bytes: the largest parameter chunk a declared layout has.
int64_t MaxChunkBytesFromFlags();

// "--name=value" for each transport flag given on the command line.
std::vector<std::string> GivenTransportFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_TRANSPORT_FLAGS_H_
