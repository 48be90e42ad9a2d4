// File: server/store_flags.h
//
// How a shard learns, defined once for ps_server and the launcher (which
// passes them on): the optimizer and its constants, the learning-rate
// schedule (--lr_schedule=auto sizes it from the job's shape,
// server/lr_rules.h), the step policy of each mode (--staleness,
// --replicas_to_aggregate, --sync_timeout_s, ...) and the snapshot interval.
// Only a main calls these functions.
//
//   DP_ASSIGN_OR_RETURN(StoreFlags f, StoreFlagsFromFlags());
//   DP_RETURN_IF_ERROR(ApplyStoreFlags(f, shape, &store_options));
#ifndef DOWNPOUR_SERVER_STORE_FLAGS_H_
#define DOWNPOUR_SERVER_STORE_FLAGS_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/lr_rules.h"
#include "server/store_types.h"

namespace downpour {

// Ssp's default bound: clocks a worker may run ahead of the slowest.
inline constexpr int kDefaultStaleness = 2;

// The values of the store flags, checked.
struct StoreFlags {
  // Optimizer and step-policy fields (mode, workers and shard are not set
  // here); optimizer.learning_rate is --lr as given, 0 for the optimizer's
  // default rate.
  ParameterStoreOptions store;
  bool lr_schedule_auto = true;      // --lr_schedule=auto (else none).
  std::string lr_worker_scaling;     // --lr_worker_scaling
  std::set<std::string> given;       // Names of the flags set on the command line.
  absl::Duration checkpoint_every;   // --checkpoint_every_s
};

absl::StatusOr<StoreFlags> StoreFlagsFromFlags();

// The shard's store options for a job of shape `job` (nullopt: its size is
// unknown, so no schedule): the flags' optimizer and policy, the default
// rate for --lr=0, the rules of --lr_schedule=auto unless a flag given wins,
// and the rate scaled for the workers. Keeps `out`'s mode, num_workers,
// shard and layout fields.
absl::Status ApplyStoreFlags(const StoreFlags& flags,
                             const std::optional<JobShape>& job,
                             ParameterStoreOptions* out);

// "--name=value" for each store flag set on the command line, for the
// launcher to pass on to its servers.
std::vector<std::string> GivenStoreFlagArgs();

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STORE_FLAGS_H_
