// File: common/flag_args.h
//
// Which flags the command line gave, and those flags as arguments for a
// child process: the launcher passes on the flags its children share with
// it (each defined once, in the children's flag libraries) exactly as the
// user gave them, so a child's defaults stay its own.
//
//   std::vector<std::string> args = GivenFlagArgs({"momentum", "lr_decay"});
//   // {"--lr_decay=step"} after `launch --lr_decay=step`
#ifndef DOWNPOUR_COMMON_FLAG_ARGS_H_
#define DOWNPOUR_COMMON_FLAG_ARGS_H_

#include <string>
#include <vector>

namespace downpour {

// Whether --name was on the command line (even with its default value).
bool FlagGiven(const char* name);

// "--name=value" (the flag's current value) for each of `names` given on
// the command line, in the order of `names`.
std::vector<std::string> GivenFlagArgs(const std::vector<const char*>& names);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_FLAG_ARGS_H_
