#include "deploy/process_launcher.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

class LocalProcess : public Process {
 public:
  explicit LocalProcess(std::unique_ptr<Subprocess> proc)
      : proc_(std::move(proc)) {}

  void ReadAvailable(std::vector<std::string>* lines) override {
    proc_->ReadAvailable(lines);
  }
  bool CheckExited() override { return proc_->CheckExited(); }
  const ExitStatus& exit_status() const override {
    return proc_->exit_status();
  }
  absl::Status Signal(int sig) override { return proc_->Signal(sig); }
  ExitStatus Terminate(absl::Duration grace,
                       std::vector<std::string>* lines) override {
    return proc_->Terminate(grace, lines);
  }
  const std::deque<std::string>& tail() const override {
    return proc_->tail();
  }

  Subprocess* subprocess() const { return proc_.get(); }

 private:
  const std::unique_ptr<Subprocess> proc_;
};

class LocalProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Process>> Start(
      const TaskSpec& spec) override {
    if (spec.host != kDefaultHost) {
      return absl::UnimplementedError(
          absl::StrCat("cannot start ", spec.name, " on host ", spec.host,
                       ": the local launcher runs tasks on ", kDefaultHost,
                       " only"));
    }
    SubprocessOptions sub;
    sub.argv = spec.argv;
    sub.log_path = spec.log_path;
    absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(sub);
    if (!proc.ok()) return proc.status();
    return std::make_unique<LocalProcess>(*std::move(proc));
  }

  void WaitForOutput(const std::vector<Process*>& procs,
                     absl::Duration timeout) override {
    std::vector<Subprocess*> subs;
    subs.reserve(procs.size());
    for (Process* p : procs) {
      subs.push_back(static_cast<LocalProcess*>(p)->subprocess());
    }
    Subprocess::PollOutput(subs, timeout);
  }
};

}  // namespace

std::unique_ptr<ProcessLauncher> NewLocalProcessLauncher() {
  return std::make_unique<LocalProcessLauncher>();
}

}  // namespace downpour
