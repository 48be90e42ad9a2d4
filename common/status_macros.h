// File: common/status_macros.h
//
// Early-return helpers for absl::Status / absl::StatusOr. Debian's abseil
// (20220623) predates ABSL_RETURN_IF_ERROR, so the project defines its own:
//
//   DP_RETURN_IF_ERROR(store->Apply(...));
//   DP_ASSIGN_OR_RETURN(auto map, ComputeShardMap(layout));
#ifndef DOWNPOUR_COMMON_STATUS_MACROS_H_
#define DOWNPOUR_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DP_RETURN_IF_ERROR(expr)                    \
  do {                                              \
    const ::absl::Status dp_status_ = (expr);       \
    if (!dp_status_.ok()) return dp_status_;        \
  } while (0)

#define DP_STATUS_CONCAT_INNER_(a, b) a##b
#define DP_STATUS_CONCAT_(a, b) DP_STATUS_CONCAT_INNER_(a, b)

#define DP_ASSIGN_OR_RETURN(lhs, expr) \
  DP_ASSIGN_OR_RETURN_IMPL_(DP_STATUS_CONCAT_(dp_statusor_, __LINE__), lhs, expr)

#define DP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // DOWNPOUR_COMMON_STATUS_MACROS_H_
