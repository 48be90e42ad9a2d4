#include "common/train_mode.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {

absl::StatusOr<TrainMode> ParseTrainMode(absl::string_view name) {
  if (name == "async") return TrainMode::kAsync;
  if (name == "sync") return TrainMode::kSync;
  if (name == "ssp") return TrainMode::kSsp;
  if (name == "sandblaster") return TrainMode::kSandblaster;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", name, "' (known: async, sync, ssp, sandblaster)"));
}

const char* TrainModeName(TrainMode mode) {
  switch (mode) {
    case TrainMode::kAsync:
      return "async";
    case TrainMode::kSync:
      return "sync";
    case TrainMode::kSsp:
      return "ssp";
    case TrainMode::kSandblaster:
      return "sandblaster";
  }
  return "unknown";
}

bool AbslParseFlag(absl::string_view text, TrainMode* mode, std::string* error) {
  absl::StatusOr<TrainMode> parsed = ParseTrainMode(text);
  if (!parsed.ok()) {
    *error = std::string(parsed.status().message());
    return false;
  }
  *mode = *parsed;
  return true;
}

std::string AbslUnparseFlag(TrainMode mode) { return TrainModeName(mode); }

}  // namespace downpour
