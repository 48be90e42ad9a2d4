#include "server/standby_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int, standby_lease_ms, 1000,
          "Standby shards: a standby takes over after this long without word "
          "from its primary (after a fifth of it when nobody listens at the "
          "primary's address), and a primary refuses workers after a third "
          "of it without its standby's answer (docs/design.md, Standby "
          "shards).");

namespace downpour {

absl::StatusOr<absl::Duration> StandbyLeaseFromFlags() {
  const int ms = absl::GetFlag(FLAGS_standby_lease_ms);
  if (ms < 50 || ms > 60000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--standby_lease_ms must be in [50, 60000], got ", ms));
  }
  return absl::Milliseconds(ms);
}

}  // namespace downpour
