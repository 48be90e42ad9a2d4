#include "deploy/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"

namespace downpour {
namespace {

// Poll granularity while stopping children.
constexpr absl::Duration kStopSlice = absl::Milliseconds(100);

}  // namespace

Supervisor::Supervisor(ProcessLauncher* launcher, std::ostream& out,
                       SupervisorOptions options, LineObserver on_line)
    : launcher_(launcher),
      out_(out),
      options_(std::move(options)),
      on_line_(std::move(on_line)) {}

Supervisor::~Supervisor() { StopAll(); }

void Supervisor::Print(absl::string_view line) {
  out_ << line << '\n';
  out_.flush();
}

absl::StatusOr<Supervisor::Child*> Supervisor::Start(const TaskSpec& spec) {
  absl::StatusOr<std::unique_ptr<Process>> proc = launcher_->Start(spec);
  if (!proc.ok()) {
    return absl::Status(proc.status().code(),
                        absl::StrCat("cannot start ", spec.name, ": ",
                                     proc.status().message()));
  }
  auto child = std::make_unique<Child>();
  child->spec = spec;
  child->proc = *std::move(proc);
  child->started = absl::Now();
  children_.push_back(std::move(child));
  return children_.back().get();
}

absl::Status Supervisor::Restart(Child* c) {
  absl::StatusOr<std::unique_ptr<Process>> proc = launcher_->Start(c->spec);
  if (!proc.ok()) {
    return absl::Status(proc.status().code(),
                        absl::StrCat("cannot restart ", c->name(), ": ",
                                     proc.status().message()));
  }
  c->proc = *std::move(proc);
  c->started = absl::Now();
  c->exit_handled = false;
  ++c->restarts;
  return absl::OkStatus();
}

void Supervisor::HandleLine(const Child& c, const std::string& line) {
  if (options_.quiet && options_.quiet(c.role(), line)) {
    // Not printed.
  } else if (absl::StartsWith(line, c.name() + ":")) {
    Print(line);
  } else {
    Print(absl::StrCat(c.name(), ": ", line));
  }
  if (on_line_) on_line_(c, line);
}

void Supervisor::Drain(Child& c) {
  std::vector<std::string> lines;
  c.proc->ReadAvailable(&lines);
  for (const std::string& line : lines) HandleLine(c, line);
}

void Supervisor::Pump(absl::Duration timeout) {
  std::vector<Process*> procs;
  for (auto& c : children_) procs.push_back(c->proc.get());
  launcher_->WaitForOutput(procs, timeout);
  for (auto& c : children_) Drain(*c);
}

std::vector<Supervisor::Child*> Supervisor::ReapExited() {
  std::vector<Child*> exited;
  for (auto& c : children_) {
    if (!c->exit_handled && c->proc->CheckExited()) {
      Drain(*c);  // Output written before the exit is still in the pipe.
      c->exit_handled = true;
      exited.push_back(c.get());
    }
  }
  return exited;
}

void Supervisor::StopAll() {
  // Workers and evaluations first, while the servers still answer them
  // (a worker whose servers are gone waits for them until killed); then
  // the servers, which drain and write their final snapshots.
  StopWave([](const Child& c) { return c.role() != TaskRole::kServer; });
  StopWave([](const Child& c) { return c.role() == TaskRole::kServer; });
}

void Supervisor::StopWave(const std::function<bool(const Child&)>& which) {
  bool any = false;
  for (auto& c : children_) {
    if (which(*c) && !c->proc->CheckExited()) {
      c->proc->Signal(SIGTERM).IgnoreError();
      any = true;
    }
  }
  if (!any) return;
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  while (absl::Now() < deadline) {
    bool all_exited = true;
    for (auto& c : children_) {
      if (which(*c)) all_exited &= c->proc->CheckExited();
    }
    if (all_exited) break;
    Pump(std::min(kStopSlice, deadline - absl::Now()));
  }
  for (auto& c : children_) {
    if (!which(*c)) continue;
    if (!c->proc->CheckExited()) {
      Print(absl::StrCat("launch: ", c->name(), " did not stop within ",
                         absl::FormatDuration(options_.stop_grace),
                         " of SIGTERM; sending SIGKILL"));
      std::vector<std::string> lines;
      c->proc->Terminate(absl::ZeroDuration(), &lines);
      for (const std::string& line : lines) HandleLine(*c, line);
    }
    Drain(*c);
  }
}

absl::Status Supervisor::Fail(const Child& c, absl::string_view why) {
  StopAll();
  const std::deque<std::string>& tail = c.proc->tail();
  const size_t first = tail.size() > options_.failure_tail_lines
                           ? tail.size() - options_.failure_tail_lines
                           : 0;
  std::string msg = absl::StrCat(c.name(), " failed (", why, "); last lines:");
  if (tail.empty()) absl::StrAppend(&msg, "\n    (no output)");
  for (size_t i = first; i < tail.size(); ++i) {
    absl::StrAppend(&msg, "\n    ", tail[i]);
  }
  absl::StrAppend(&msg, "\n(full logs in ", options_.log_dir, ")");
  return absl::Status(StatusCodeForExit(c.proc->exit_status()), msg);
}

absl::StatusCode StatusCodeForExit(const ExitStatus& st) {
  if (st.signal != 0) return absl::StatusCode::kAborted;  // Killed: retry.
  switch (st.exit_code) {
    case kExitFatal:
      return absl::StatusCode::kFailedPrecondition;
    case kExitRetryable:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::Status Supervisor::CheckStopSignal() {
  if (options_.stop_signal == nullptr) return absl::OkStatus();
  const int sig = options_.stop_signal->load();
  if (sig == 0) return absl::OkStatus();
  Print(absl::StrCat("launch: got signal ", sig,
                     "; stopping the workers, then the servers"));
  StopAll();
  return absl::CancelledError(absl::StrCat("interrupted by signal ", sig));
}

}  // namespace downpour
