// File: common/cluster_spec_internal.h
//
// Small parsing helpers shared by common/cluster_spec.cc (flags, TF_CONFIG)
// and common/slurm_env.cc (Slurm's variables). Private to the
// //common:cluster_spec target: not part of its API.
#ifndef DOWNPOUR_COMMON_CLUSTER_SPEC_INTERNAL_H_
#define DOWNPOUR_COMMON_CLUSTER_SPEC_INTERNAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace downpour {
namespace cluster_spec_internal {

// No job has more tasks than this; a larger count is a typo, and capping it
// keeps a bad nodelist such as "n[1-999999999]" from eating memory.
inline constexpr int64_t kMaxTasks = 100000;

inline absl::Status Invalid(absl::string_view a, absl::string_view b = "",
                            absl::string_view c = "", absl::string_view d = "",
                            absl::string_view e = "",
                            absl::string_view f = "") {
  return absl::InvalidArgumentError(absl::StrCat(a, b, c, d, e, f));
}

// A run of 1..9 decimal digits and nothing else (no sign, no spaces).
inline bool ParseDigits(absl::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 9) return false;
  int64_t v = 0;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

inline bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_';
}

}  // namespace cluster_spec_internal
}  // namespace downpour

#endif  // DOWNPOUR_COMMON_CLUSTER_SPEC_INTERNAL_H_
