#include "server/step_policies.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/async_policy.h"
#include "server/ssp_policy.h"
#include "server/sync_policy.h"
#include "server/waiting_policy.h"

namespace downpour {

absl::Status ValidateStepPolicyOptions(const ParameterStoreOptions& options) {
  if (options.mode == TrainMode::kSync || options.mode == TrainMode::kSsp) {
    DP_RETURN_IF_ERROR(ValidateWaitingOptions(options));
  }
  if (options.num_workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_workers must be >= 0, got ", options.num_workers));
  }
  if (options.drop_stale_threshold < 0) {
    return absl::InvalidArgumentError("drop_stale_threshold must be >= 0");
  }
  return absl::OkStatus();
}

std::unique_ptr<StepPolicy> CreateStepPolicy(StepContext ctx) {
  switch (ctx.options->mode) {
    case TrainMode::kAsync:
    // Sandblaster's shards take no optimizer pushes (the shard-side L-BFGS,
    // server/lbfgs_shard.h, writes the values); async serves its pulls.
    case TrainMode::kSandblaster:
      return NewAsyncPolicy(std::move(ctx));
    case TrainMode::kSync:
      return NewSyncPolicy(std::move(ctx));
    case TrainMode::kSsp:
      return NewSspPolicy(std::move(ctx));
  }
  return nullptr;
}

}  // namespace downpour
