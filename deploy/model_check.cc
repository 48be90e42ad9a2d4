// File: deploy/model_check.cc
#include "deploy/model_check.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "worker/nn/model_spec.h"

namespace downpour {

absl::Status CheckJobModel(const std::string& model, DatasetKind dataset) {
  DP_ASSIGN_OR_RETURN(const ResolvedModel m, LoadModel(model));
  switch (dataset) {
    case DatasetKind::kFashionMnist:
      return CheckModelFitsData(m, 1, 28, 28, 10);
    case DatasetKind::kCifar10:
      return CheckModelFitsData(m, 3, 32, 32, 10);
    default:
      return absl::OkStatus();
  }
}

std::string FlagValueIn(const std::vector<std::string>& args,
                        const std::string& name) {
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    for (const std::string& flag : {"--" + name, "-" + name}) {
      if (absl::StartsWith(a, flag + "=")) value = a.substr(flag.size() + 1);
      if (a == flag && i + 1 < args.size()) value = args[i + 1];
    }
  }
  return value;
}

}  // namespace downpour
