// File: server/step_policies.h
//
// The one place a training mode (common/train_mode.h) is mapped to its step
// policy (server/step_policy.h): the store validates its options and creates
// its policy here once, and never looks at the mode again.
//
//   DP_RETURN_IF_ERROR(ValidateStepPolicyOptions(options));
//   std::unique_ptr<StepPolicy> policy = CreateStepPolicy(ctx);
//
// Thread-safety: pure functions.
#ifndef DOWNPOUR_SERVER_STEP_POLICIES_H_
#define DOWNPOUR_SERVER_STEP_POLICIES_H_

#include <memory>

#include "absl/status/status.h"
#include "server/step_policy.h"

namespace downpour {

// InvalidArgument when the options do not fit options.mode (see
// ParameterStoreOptions).
absl::Status ValidateStepPolicyOptions(const ParameterStoreOptions& options);

// The policy for ctx.options->mode; the options must have passed
// ValidateStepPolicyOptions.
std::unique_ptr<StepPolicy> CreateStepPolicy(StepContext ctx);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_STEP_POLICIES_H_
