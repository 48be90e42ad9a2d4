#include "worker/nn/conv_algo_choice.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

absl::StatusOr<ConvAlgoChoice> ChooseConvAlgo(
    const std::vector<RankedAlgo>& ranking, const std::vector<int>& fallbacks,
    bool allow_transform, size_t limit,
    const std::function<bool(int)>& is_transform,
    const std::function<bool(int, size_t*)>& workspace_size) {
  auto usable = [&](int algo, size_t* bytes) {
    if (!allow_transform && is_transform(algo)) return false;
    if (!workspace_size(algo, bytes)) return false;
    return *bytes <= limit;
  };
  for (bool deterministic_only : {true, false}) {
    for (const RankedAlgo& p : ranking) {
      if (!p.ok) continue;
      if (deterministic_only && !p.deterministic) continue;
      size_t bytes = 0;
      if (usable(p.algo, &bytes)) return ConvAlgoChoice{p.algo, bytes};
    }
  }
  for (int algo : fallbacks) {
    size_t bytes = 0;
    if (usable(algo, &bytes)) return ConvAlgoChoice{algo, bytes};
  }
  return absl::UnimplementedError(absl::StrCat(
      "no usable cuDNN algorithm among ", ranking.size(), " ranked and ",
      fallbacks.size(), " fallback candidates within the workspace limit of ",
      limit, " bytes"));
}

}  // namespace downpour
