// File: rpc/security_flags.h
//
// The security flags every binary of a job shares, defined once here so
// that ps_server, ps_worker, the node entry point and the launcher spell
// them alike: --tls_cert, --tls_key, --tls_ca, --auth_token_file,
// --allow_insecure. Only a main calls these functions (flags are read in
// main only); library code takes TransportSecurityOptions.
//
//   absl::ParseCommandLine(argc, argv);
//   auto security = SecurityOptionsFromFlags();   // InvalidArgument: bad flags
//   host_options.security = *security;
#ifndef DOWNPOUR_RPC_SECURITY_FLAGS_H_
#define DOWNPOUR_RPC_SECURITY_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/credentials.h"

namespace downpour {

absl::StatusOr<TransportSecurityOptions> SecurityOptionsFromFlags();

// The same flags as "--name=value" arguments for a child process (only
// those set), for the launcher to pass on.
std::vector<std::string> SecurityArgsFor(const TransportSecurityOptions& o);

}  // namespace downpour

#endif  // DOWNPOUR_RPC_SECURITY_FLAGS_H_
