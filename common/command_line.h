// File: common/command_line.h
//
// The one command-line front end of every Downpour binary, so that a
// restart policy that reads exit codes (common/exit_codes.h) never retries a
// typo: `--help` (and --helpfull, --helpshort, -h, --helpmatch=S) prints the
// usage and the flags on stdout and exits 0; an unknown flag, a flag
// without its value or a value its flag cannot parse prints one line on
// stderr, with the closest flag name for a typo, and exits 2:
//
//   launch: unknown flag --servrs; did you mean --servers? (launch --help lists the flags)
//
// The check runs against abseil's flag registry before
// absl::ParseCommandLine, which would exit 1 itself; names listed in
// --undefok are let through as abseil lets them. A --flagfile that cannot
// be opened exits 2 too; the flags read from it are checked by abseil
// alone.
//
//   int main(int argc, char** argv) {
//     absl::SetProgramUsageMessage("...");
//     std::vector<char*> positional = ParseCommandLineOrExit(argc, argv);
//
// ParseCommandLineOrExit is for a main only: it may exit the process.
#ifndef DOWNPOUR_COMMON_COMMAND_LINE_H_
#define DOWNPOUR_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace downpour {

// What `args` (argv without the program name) ask for.
struct CommandLineRequest {
  bool help = false;          // --help, --helpfull, --helpshort, -h, --helpmatch.
  std::string help_filter;    // --helpmatch=S / --helpon=S: flags of files
                              // whose name contains S; "" for all.
};

// Scans `args` for a help request (the first one wins).
CommandLineRequest FindHelpRequest(const std::vector<std::string>& args);

// Checks every flag of `args` against the registry: InvalidArgument
// "unknown flag --x; did you mean --y?", "--x needs a value" or
// "bad value 'v' for --x: <why>". A value that parses is also stored in
// its flag (absl::ParseCommandLine stores it again).
absl::Status CheckFlagArgs(const std::vector<std::string>& args);

// The registered flag name closest to `name` (edit distance at most a
// third of its length, at least 1; else the one flag starting with it);
// "" when none is close.
std::string ClosestFlagName(absl::string_view name);

// Handles help (exit 0) and bad flags (exit 2) as above, then returns what
// absl::ParseCommandLine returns: argv[0] and the positional arguments.
std::vector<char*> ParseCommandLineOrExit(int argc, char** argv);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_COMMAND_LINE_H_
