// File: worker/nn/conv_algo_choice.cc (see conv_algo_choice.h).
#include "worker/nn/conv_algo_choice.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

absl::StatusOr<ConvAlgoChoice> ChooseConvAlgo(
    const std::vector<RankedAlgo>& ranking, const std::vector<int>& fallbacks,
    const ConvAlgoRules& rules, const std::set<int>& bad,
    const std::function<bool(int)>& is_transform,
    const std::function<bool(int, size_t*)>& workspace_size) {
  auto usable = [&](int algo, size_t* bytes) {
    if (bad.count(algo) > 0) return false;
    if (!rules.allow_transform && is_transform(algo)) return false;
    if (!workspace_size(algo, bytes)) return false;
    return *bytes <= rules.workspace_limit;
  };
  const std::vector<bool> passes =
      rules.deterministic ? std::vector<bool>{true, false}
                          : std::vector<bool>{false};
  for (bool deterministic_only : passes) {
    for (const RankedAlgo& p : ranking) {
      if (!p.ok) continue;
      if (!rules.allow_tf32 && !p.fma_math) continue;
      if (deterministic_only && !p.deterministic) continue;
      size_t bytes = 0;
      if (usable(p.algo, &bytes)) {
        return ConvAlgoChoice{p.algo, bytes, p.math_type};
      }
    }
  }
  for (int algo : fallbacks) {
    size_t bytes = 0;
    if (usable(algo, &bytes)) {
      return ConvAlgoChoice{algo, bytes, rules.fallback_math_type};
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "no usable cuDNN algorithm among ", ranking.size(), " ranked and ",
      fallbacks.size(), " fallback candidates (", bad.size(),
      " marked bad) within the workspace limit of ", rules.workspace_limit,
      " bytes"));
}

bool IsAlgoRetryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnimplemented ||
         s.code() == absl::StatusCode::kResourceExhausted;
}

absl::Status RunWithAlgoRetry(
    AlgoSlot* slot,
    const std::function<absl::StatusOr<ConvAlgoChoice>(const std::set<int>&)>&
        choose,
    const std::function<absl::Status(const ConvAlgoChoice&)>& run,
    const std::function<void(const std::string&)>& log) {
  std::string failures;  // "algorithm 1: ...; algorithm 0: ..." this call.
  absl::StatusCode last_code = absl::StatusCode::kOk;
  while (true) {
    if (!slot->chosen) {
      absl::StatusOr<ConvAlgoChoice> c = choose(slot->bad);
      if (!c.ok()) {
        if (failures.empty()) return c.status();
        return absl::Status(last_code,
                            absl::StrCat("every usable cuDNN algorithm failed "
                                         "to run (", failures, "); then: ",
                                         c.status().message()));
      }
      slot->choice = *c;
      slot->chosen = true;
    }
    const absl::Status s = run(slot->choice);
    if (s.ok() || !IsAlgoRetryable(s)) return s;
    const std::string why =
        absl::StrCat("algorithm ", slot->choice.algo, ": ", s.message());
    if (log) {
      log(absl::StrCat("cuDNN ", why, "; marked bad, taking the next one"));
    }
    absl::StrAppend(&failures, failures.empty() ? "" : "; ", why);
    last_code = s.code();
    slot->bad.insert(slot->choice.algo);
    slot->chosen = false;
  }
}

}  // namespace downpour
