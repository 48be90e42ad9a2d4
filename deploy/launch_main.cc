// launch: runs a Downpour cluster (parameter servers + workers + evaluation)
// on localhost. See deploy/launcher.h for the behaviour and output contract.
//
//   bazel run //deploy:launch -- --servers=2 --workers=4 --epochs=1
//
// Exit codes (common/exit_codes.h): 0 success; 2 a bad flag, value, file or
// output path, found before any child starts, or a child that exited 2; 3 a
// child that exited 3 or was killed; 1 a child that exited 1, or any other
// failure; 130 interrupted (SIGINT/SIGTERM): the workers are stopped first,
// then the servers (which write their final snapshots), and the last line
// is the command that resumes the run (deploy/resume_check.h).
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "common/command_line.h"
#include "common/exit_codes.h"
#include "common/output_paths.h"
#include "common/process_setup.h"
#include "deploy/launch_flags.h"
#include "deploy/launcher.h"
#include "deploy/model_check.h"
#include "deploy/resume_check.h"
#include "worker/training_flags.h"

namespace {

// The rule of common/exit_codes.h (0 done, 2 fatal,
// 3 retryable: a child failed, 1 other), and 130 when interrupted by
// SIGINT/SIGTERM.
int ExitCodeFor(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) return 130;
  return downpour::ExitCodeForStatus(s);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a Downpour-SGD cluster on localhost: parameter servers, workers "
      "and a final evaluation.\n  launch --servers=2 --workers=2 --epochs=3");
  std::vector<char*> positional = downpour::ParseCommandLineOrExit(argc, argv);
  downpour::SetUpProcess();
  if (positional.size() > 1) {
    std::cerr << "launch: unexpected argument '" << positional[1]
              << "' (all options are --flags)\n";
    return 2;
  }

  downpour::LaunchOptions o;
  if (!downpour::LaunchOptionsFromFlags(argv[0], &o)) return 2;
  o.command_line.assign(argv, argv + argc);

  if (absl::Status s = downpour::ValidateLaunchOptions(o); !s.ok()) {
    std::cerr << "launch: " << s.message() << "\n";
    return ExitCodeFor(s);
  }
  // The model spec, before any process starts.
  absl::StatusOr<downpour::TrainingFlags> training =
      downpour::TrainingFlagsFromFlags();
  absl::Status model_ok = training.status();
  if (model_ok.ok()) model_ok = downpour::CheckJobModel(training->model, o.dataset);
  if (!model_ok.ok()) {
    std::cerr << "launch: " << model_ok.message() << "\n";
    return 2;
  }
  if (const std::string note = o.SharedGpuNote(); !note.empty()) {
    std::cout << note << std::endl;
  }
  // Every file written at the end, before anything starts.
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"save_params",
                                                   o.save_params},
        {"summary_json", o.summary_json},
        {"curve_csv", o.curve_csv}}) {
    if (absl::Status s = downpour::PrepareOutputFile(flag, path); !s.ok()) {
      std::cerr << "launch: " << s.message() << "\n";
      return downpour::kExitFatal;
    }
  }
  if (absl::Status s = downpour::PrepareOutputDir("log_dir", o.log_dir);
      !s.ok()) {
    std::cerr << "launch: " << s.message() << "\n";
    return downpour::kExitFatal;
  }
  // Snapshots already in --log_dir: refused, or resumed with --resume.
  absl::StatusOr<std::string> resuming = downpour::CheckLogDirForResume(o);
  if (!resuming.ok()) {
    std::cerr << "launch: " << resuming.status().message() << "\n";
    return downpour::kExitFatal;
  }
  if (!resuming->empty()) std::cout << *resuming << std::endl;
  // SIGINT/SIGTERM: RunCluster polls the signal's number, stops every child
  // and returns Cancelled (exit 130).
  absl::StatusOr<std::unique_ptr<downpour::StopSignal>> stop =
      downpour::StopSignal::Install();
  if (!stop.ok()) {
    std::cerr << "launch: " << stop.status().message() << "\n";
    return 1;
  }
  // A closed stdout (e.g. `launch | head`) must not kill the launcher before
  // it has stopped its children. Children get default dispositions back.
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<downpour::Summary> summary =
      downpour::RunCluster(o, std::cout, (*stop)->signal_number());
  if (!summary.ok()) {
    std::cout.flush();
    std::cout << "launch: " << summary.status().message() << std::endl;
    return ExitCodeFor(summary.status());
  }
  return 0;
}
