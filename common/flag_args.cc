#include "common/flag_args.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"

namespace downpour {

// The public CommandLineFlag keeps IsSpecifiedOnCommandLine private in this
// abseil (20220623); its parser exports the same fact.
bool FlagGiven(const char* name) {
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

std::vector<std::string> GivenFlagArgs(const std::vector<const char*>& names) {
  std::vector<std::string> args;
  for (const char* name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && FlagGiven(name)) {
      args.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
    }
  }
  return args;
}

}  // namespace downpour
