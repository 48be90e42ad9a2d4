#include "common/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/exit_codes.h"

namespace downpour {
namespace {

// abseil's own flags, whose values abseil's parser acts on itself.
bool IsParserFlag(absl::string_view name) {
  return name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
         name == "undefok";
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The names --undefok=a,b lets through unknown.
std::set<std::string> UndefOk(const std::vector<std::string>& args) {
  std::set<std::string> names;
  for (const std::string& a : args) {
    for (absl::string_view prefix : {"--undefok=", "-undefok="}) {
      if (absl::StartsWith(a, prefix)) {
        for (absl::string_view n :
             absl::StrSplit(a.substr(prefix.size()), ',', absl::SkipEmpty())) {
          names.insert(std::string(n));
        }
      }
    }
  }
  return names;
}

absl::Status UnknownFlag(absl::string_view name) {
  const std::string closest = ClosestFlagName(name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown flag --", name,
      closest.empty() ? "" : absl::StrCat("; did you mean --", closest, "?")));
}

}  // namespace

CommandLineRequest FindHelpRequest(const std::vector<std::string>& args) {
  CommandLineRequest r;
  for (const std::string& a : args) {
    if (a == "--") break;
    absl::string_view s = a;
    if (!absl::ConsumePrefix(&s, "--")) absl::ConsumePrefix(&s, "-");
    if (s == "help" || s == "helpfull" || s == "helpshort" || s == "h" ||
        s == "helppackage" || s == "help=true" || s == "helpfull=true") {
      r.help = true;
      return r;
    }
    for (absl::string_view prefix : {"helpmatch=", "helpon="}) {
      if (absl::ConsumePrefix(&s, prefix)) {
        r.help = true;
        r.help_filter = std::string(s);
        return r;
      }
    }
  }
  return r;
}

std::string ClosestFlagName(absl::string_view name) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  std::vector<std::string> starting;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const size_t d = EditDistance(name, flag_name);
    if (d < best_distance || (d == best_distance && flag_name < best)) {
      if (d < best_distance) best_distance = d;
      best = std::string(flag_name);
    }
    if (name.size() >= 3 && absl::StartsWith(flag_name, name)) {
      starting.push_back(std::string(flag_name));
    }
  }
  if (best.empty() && starting.size() == 1) return starting[0];
  return best;
}

absl::Status CheckFlagArgs(const std::vector<std::string>& args) {
  const std::set<std::string> undefok = UndefOk(args);
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;  // The rest is positional.
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if ((flag == nullptr || flag->IsRetired()) &&
        absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && !positive->IsRetired() &&
          positive->IsOfType<bool>()) {
        flag = positive;
        negated = true;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      if (undefok.count(std::string(name)) > 0) continue;
      return UnknownFlag(name);
    }
    if (IsParserFlag(flag->Name())) {
      std::string value = has_value ? std::string(arg.substr(eq + 1))
                                    : (i + 1 < args.size() ? args[i + 1] : "");
      if (!has_value) ++i;  // "--flagfile FILE".
      // abseil exits 1 on a flagfile it cannot open; a bad path is a
      // configuration error (exit 2) like any other bad flag.
      if (flag->Name() == "flagfile") {
        for (absl::string_view path :
             absl::StrSplit(value, ',', absl::SkipEmpty())) {
          if (!std::ifstream(std::string(path)).good()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "--flagfile=", path, ": cannot open the file (",
                std::strerror(errno), ")"));
          }
        }
      }
      continue;
    }
    if (negated) {
      if (has_value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name, " takes no value (use --", flag->Name(), "=false)"));
      }
      continue;
    }
    std::string value;
    if (has_value) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value (--", name, "=VALUE)"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      // abseil's own "Illegal value 'v' specified for flag 'x'" says no more
      // than this; what a flag type adds after it is kept.
      absl::string_view why = error;
      if (absl::StartsWith(why, "Illegal value")) {
        const size_t end = why.find(absl::StrCat("'", name, "'"));
        why = end == absl::string_view::npos
                  ? absl::string_view()
                  : why.substr(end + name.size() + 2);
        absl::ConsumePrefix(&why, ";");
        why = absl::StripAsciiWhitespace(why);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "bad value '", value, "' for --", name,
          why.empty() ? "" : absl::StrCat(": ", why)));
    }
  }
  return absl::OkStatus();
}

std::vector<char*> ParseCommandLineOrExit(int argc, char** argv) {
  std::string program = argc > 0 ? argv[0] : "downpour";
  program = program.substr(program.rfind('/') + 1);
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  const CommandLineRequest request = FindHelpRequest(args);
  if (request.help) {
    absl::flags_internal::SetProgramInvocationName(argc > 0 ? argv[0] : "");
    absl::flags_internal::FlagsHelp(
        std::cout, request.help_filter,
        absl::flags_internal::HelpFormat::kHumanReadable,
        absl::ProgramUsageMessage());
    std::cout.flush();
    std::exit(kExitOk);
  }
  if (absl::Status s = CheckFlagArgs(args); !s.ok()) {
    std::fprintf(stderr, "%s: %s (%s --help lists the flags)\n",
                 program.c_str(), std::string(s.message()).c_str(),
                 program.c_str());
    std::exit(kExitFatal);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace downpour
