// File: common/cluster_spec_test_util.h
//
// Test helpers shared by cluster_spec_test.cc and slurm_env_test.cc: an
// injected environment (FakeEnv), an InvalidArgument matcher naming the
// parts its message must hold, and a typical Slurm step's variables.
#ifndef DOWNPOUR_COMMON_CLUSTER_SPEC_TEST_UTIL_H_
#define DOWNPOUR_COMMON_CLUSTER_SPEC_TEST_UTIL_H_

#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/cluster_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace cluster_spec_testing {

using Env = std::map<std::string, std::string>;

inline EnvLookup FakeEnv(Env vars) {
  return [vars = std::move(vars)](
             const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Asserts `s` is InvalidArgument whose message holds every one of `parts`.
template <typename T>
void ExpectInvalid(const T& result, std::vector<std::string> parts) {
  absl::Status s;
  if constexpr (std::is_same_v<T, absl::Status>) {
    s = result;
  } else {
    s = result.status();
  }
  ASSERT_FALSE(s.ok()) << "expected an error containing " << parts[0];
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) {
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(p));
  }
}

// `srun -n 6` over two nodes, three tasks each.
inline Env SixTasksOnTwoNodes(int procid) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_STEP_NUM_TASKS", "6"},
          {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"},
          {"SLURM_NODEID", std::to_string(procid / 3)},
          {"SLURM_LOCALID", std::to_string(procid % 3)}};
}

}  // namespace cluster_spec_testing
}  // namespace downpour

#endif  // DOWNPOUR_COMMON_CLUSTER_SPEC_TEST_UTIL_H_
