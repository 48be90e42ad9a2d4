#include "deploy/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/strings/match.h"
#include "common/exit_codes.h"
#include "common/status_macros.h"
#include "deploy/cluster_plan.h"
#include "deploy/free_ports.h"
#include "deploy/resume_check.h"
#include "deploy/supervisor.h"

namespace downpour {
namespace {

using Child = Supervisor::Child;

// Poll granularity of the supervision loop: bounds how late an exit, a
// timeout or a stop signal is noticed.
constexpr absl::Duration kPumpSlice = absl::Milliseconds(100);

// One run of the cluster: the plan's phases (servers, training with curve
// evaluations, final evaluation, stop) over a Supervisor, and what the
// children reported. Owns the supervisor, which stops every child when the
// run is destroyed.
class ClusterRun {
 public:
  ClusterRun(const LaunchOptions& options, ProcessLauncher* launcher,
             std::ostream& out, const std::atomic<int>* stop_signal)
      : options_(options),
        launcher_(launcher),
        out_(out),
        stop_signal_(stop_signal) {}
  // Stops the children while the reports their last lines go to still exist.
  ~ClusterRun() {
    if (sup_ != nullptr) sup_->StopAll();
  }

  absl::StatusOr<Summary> Run();

  // Where the logs are (known once Run has started).
  const std::string& log_dir() const { return log_dir_; }
  // What the final evaluation could not write, when it saved the parameters
  // into the log folder instead: "cannot write --save_params=...".
  const std::string& save_error() const { return save_error_; }
  // True from the workers' start until their training is done: a run
  // stopped then can be resumed from its snapshots and data positions.
  bool training() const { return training_; }

 private:
  void OnLine(const Child& c, const std::string& line) {
    RecordChildLine(c.role(), line, &reports_[&c]);
  }
  // The machine-readable SERVER_STATS lines of an evaluation stay in its log:
  // each server prints its statistics as it stops.
  static bool Quiet(TaskRole role, const std::string& line) {
    return role == TaskRole::kEval && absl::StartsWith(line, "SERVER_STATS ");
  }
  absl::StatusOr<Child*> Start(const TaskSpec& spec);
  // A server or training worker `c` exited `phase`
  // (", while workers were running"); restarts it when --max_restarts
  // allows (a server on its old port, from its snapshot), else fails the
  // job naming it and why (FailedPrecondition for a fatal exit code 2).
  absl::Status RestartOrFail(Child* c, absl::string_view phase);
  absl::Status StartServersAndWaitForPorts();
  // Records the ports written so far; true when every server has one.
  bool ReadPorts();
  absl::Status RunTraining();
  // Lets a curve evaluation still running finish after training.
  absl::Status FinishRunningCurveEval();
  absl::Status RunEval();
  // The final evaluation `failed` after its EVAL line: --save_params could
  // not be written. Saves the parameters into the log folder instead.
  absl::Status SaveIntoLogDir(const Child& failed);
  // Starts a curve evaluation when one is due and none is running.
  absl::Status MaybeStartCurveEval();
  // Handles the exit of a curve evaluation: a point or a warning.
  void FinishCurveEval(Child& c);
  void AddCurvePoint(double seconds, double test_accuracy);
  void MaybeReportRate();
  void StopServers();
  RunRecord Record() const;

  const LaunchOptions& options_;
  ProcessLauncher* const launcher_;             // Not owned.
  std::ostream& out_;                           // Not owned.
  const std::atomic<int>* const stop_signal_;  // Not owned; may be null.

  std::unique_ptr<ClusterPlan> plan_;
  std::unique_ptr<Supervisor> sup_;
  std::map<const Child*, ChildReport> reports_;
  std::vector<TaskSpec> server_specs_;
  std::vector<Child*> servers_;
  // With --standby: each shard's standby (also role kServer; started once
  // every primary listens) and whether its port file was seen.
  std::vector<TaskSpec> standby_specs_;
  std::vector<Child*> standbys_;
  std::vector<bool> standby_ready_;
  std::vector<Child*> workers_;
  Child* eval_ = nullptr;
  Child* curve_eval_ = nullptr;  // The running curve evaluation, if any.
  absl::Time next_curve_eval_;
  std::vector<CurvePoint> curve_;
  std::vector<int> ports_;
  std::vector<std::string> addresses_;  // host:port of each shard.

  std::string log_dir_;
  bool training_ = false;
  std::string saved_params_;  // Where the parameters were saved.
  std::string save_error_;

  absl::Time start_;
  absl::Time train_start_;
  absl::Time train_end_;
  absl::Time eval_end_;
  absl::Time last_rate_report_;
};

absl::StatusOr<Child*> ClusterRun::Start(const TaskSpec& spec) {
  absl::StatusOr<Child*> c = sup_->Start(spec);
  if (c.ok()) reports_[*c];  // Every child has a report, maybe empty.
  return c;
}

bool ClusterRun::ReadPorts() {
  int ready = 0;
  for (int k = 0; k < options_.servers; ++k) {
    if (ports_[k] == 0) {
      if (std::optional<int> port = ReadPortFile(server_specs_[k].port_file)) {
        ports_[k] = *port;
        sup_->Print(absl::StrCat("launch: server ", k, " listening on ",
                                 plan_->ServerAddress(*port)));
      }
    }
    if (ports_[k] != 0) ++ready;
  }
  for (size_t k = 0; k < standbys_.size(); ++k) {
    if (standby_ready_[k]) continue;
    if (std::optional<int> port = ReadPortFile(standby_specs_[k].port_file)) {
      standby_ready_[k] = true;
      sup_->Print(absl::StrCat("launch: standby ", k, " listening on ",
                               plan_->ServerAddress(*port)));
    }
  }
  return ready == options_.servers &&
         std::find(standby_ready_.begin(), standby_ready_.end(), false) ==
             standby_ready_.end();
}

absl::Status ClusterRun::StartServersAndWaitForPorts() {
  start_ = absl::Now();
  server_specs_ = plan_->Servers();
  for (const TaskSpec& spec : server_specs_) {
    unlink(spec.port_file.c_str());
    DP_ASSIGN_OR_RETURN(Child * c, Start(spec));
    servers_.push_back(c);
  }
  standby_specs_ = plan_->Standbys();
  ports_.assign(options_.servers, 0);
  const absl::Time deadline = start_ + options_.startup_timeout;
  while (true) {
    if (ReadPorts() && standbys_.size() == standby_specs_.size()) break;
    if (standbys_.empty() && !standby_specs_.empty() &&
        std::find(ports_.begin(), ports_.end(), 0) == ports_.end()) {
      // The standbys once every primary listens: each joins its primary
      // and then listens (a standby that finds no primary only waits).
      for (const TaskSpec& spec : standby_specs_) {
        unlink(spec.port_file.c_str());
        DP_ASSIGN_OR_RETURN(Child * c, Start(spec));
        standbys_.push_back(c);
      }
      standby_ready_.assign(standbys_.size(), false);
      continue;
    }
    for (Child* c : sup_->ReapExited()) {
      return sup_->Fail(*c, absl::StrCat(c->proc->exit_status().ToString(),
                                         ", during startup"));
    }
    DP_RETURN_IF_ERROR(sup_->CheckStopSignal());
    if (absl::Now() >= deadline) {
      for (int k = 0; k < options_.servers; ++k) {
        if (ports_[k] != 0) continue;
        return sup_->Fail(
            *servers_[k],
            absl::StrCat("no port file ", server_specs_[k].port_file,
                         " after ",
                         absl::FormatDuration(options_.startup_timeout)));
      }
      for (size_t k = 0; k < standbys_.size(); ++k) {
        if (standby_ready_[k]) continue;
        return sup_->Fail(
            *standbys_[k],
            absl::StrCat("no port file ", standby_specs_[k].port_file,
                         " after ",
                         absl::FormatDuration(options_.startup_timeout)));
      }
    }
    sup_->Pump(kPumpSlice);
  }
  for (int port : ports_) addresses_.push_back(plan_->ServerAddress(port));
  return absl::OkStatus();
}

absl::Status ClusterRun::RestartOrFail(Child* c, absl::string_view phase) {
  const ExitStatus& st = c->proc->exit_status();
  const std::string why = absl::StrCat(st.ToString(), phase);
  if (st.signal == 0 && st.exit_code == kExitFatal) {
    // Bad flags or configuration: a restart would fail the same way.
    const absl::Status s = sup_->Fail(
        *c, absl::StrCat(why, "; exit code 2 is fatal, not restarted"));
    return absl::FailedPreconditionError(s.message());
  }
  if (options_.max_restarts == 0) return sup_->Fail(*c, why);
  if (c->restarts >= options_.max_restarts) {
    return sup_->Fail(*c, absl::StrCat(why, "; already restarted ",
                                       c->restarts, " times (--max_restarts=",
                                       options_.max_restarts, ")"));
  }
  // Same port, so workers find it (a task of a spec has its port fixed, and
  // a shard's process with a standby rejoins as the standby).
  if (c->role() == TaskRole::kServer && c->spec.port == 0) {
    for (std::string& arg : c->spec.argv) {
      if (absl::StartsWith(arg, "--port=")) {
        arg = absl::StrCat("--port=", ports_[c->spec.index]);
      }
    }
  }
  if (c->role() == TaskRole::kServer) unlink(c->spec.port_file.c_str());
  sup_->Print(absl::StrCat("launch: restarting ", c->name(), " (", why,
                           "; restart ", c->restarts + 1, " of ",
                           options_.max_restarts, ")"));
  if (absl::Status s = sup_->Restart(c); !s.ok()) {
    sup_->StopAll();
    return s;
  }
  return absl::OkStatus();
}

void ClusterRun::MaybeReportRate() {
  const absl::Time now = absl::Now();
  if (now - last_rate_report_ < options_.rate_report_interval) return;
  std::vector<WorkerProgress> latest;
  for (Child* w : workers_) {
    const ChildReport& r = reports_[w];
    if (!w->exit_handled && !r.done && r.latest) latest.push_back(*r.latest);
  }
  std::optional<std::string> line = ClusterRateLine(latest);
  if (!line) return;
  last_rate_report_ = now;
  sup_->Print(*line);
}

absl::Status ClusterRun::RunTraining() {
  train_start_ = absl::Now();
  last_rate_report_ = train_start_;
  next_curve_eval_ = train_start_ + options_.eval_every;
  for (const TaskSpec& spec : plan_->Workers(addresses_)) {
    absl::StatusOr<Child*> c = Start(spec);
    if (!c.ok()) {
      sup_->StopAll();
      return c.status();
    }
    workers_.push_back(*c);
  }
  training_ = true;
  int running = options_.workers;
  while (running > 0) {
    sup_->Pump(kPumpSlice);
    for (Child* c : sup_->ReapExited()) {
      const ExitStatus& st = c->proc->exit_status();
      if (c->role() == TaskRole::kServer) {
        DP_RETURN_IF_ERROR(RestartOrFail(c, ", while workers were running"));
        continue;
      }
      if (c->role() == TaskRole::kCurveEval) {
        FinishCurveEval(*c);
        continue;
      }
      if (!st.success()) {
        DP_RETURN_IF_ERROR(RestartOrFail(c, ""));
        continue;
      }
      if (!reports_[c].done) {
        return sup_->Fail(*c, "exit code 0 but no DONE line was printed");
      }
      --running;
    }
    DP_RETURN_IF_ERROR(sup_->CheckStopSignal());
    MaybeReportRate();
    if (running > 0) DP_RETURN_IF_ERROR(MaybeStartCurveEval());
  }
  train_end_ = absl::Now();
  training_ = false;
  // The snapshots are now of the trained model: nothing to resume.
  WriteFileAtomically(
      absl::StrCat(log_dir_, "/ckpt/", kTrainedMarker), "training done\n")
      .IgnoreError();
  int64_t examples = 0;
  for (Child* w : workers_) {
    if (reports_[w].done) examples += reports_[w].done->examples;
  }
  const double seconds = absl::ToDoubleSeconds(train_end_ - train_start_);
  sup_->Print(absl::StrFormat(
      "launch: training done in %.1f s (%.1f examples/sec over the whole "
      "training, as in SUMMARY)",
      seconds, seconds > 0 ? examples / seconds : 0.0));
  return FinishRunningCurveEval();
}

absl::Status ClusterRun::FinishRunningCurveEval() {
  // A curve evaluation still running measures parameters from before the
  // end of training: let it finish (its client's RPC deadlines bound this)
  // rather than lose the point, and keep it off the final evaluation's CPUs.
  while (curve_eval_ != nullptr) {
    sup_->Pump(kPumpSlice);
    for (Child* c : sup_->ReapExited()) {
      if (c->role() == TaskRole::kServer) {
        DP_RETURN_IF_ERROR(RestartOrFail(c, ", after training"));
      }
      if (c->role() == TaskRole::kCurveEval) FinishCurveEval(*c);
    }
    DP_RETURN_IF_ERROR(sup_->CheckStopSignal());
  }
  return absl::OkStatus();
}

absl::Status ClusterRun::MaybeStartCurveEval() {
  if (options_.eval_every <= absl::ZeroDuration()) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now < next_curve_eval_) return absl::OkStatus();
  // Ticks that pass while an evaluation runs (or while the loop is late) are
  // skipped, not made up for.
  while (next_curve_eval_ <= now) next_curve_eval_ += options_.eval_every;
  if (curve_eval_ != nullptr) return absl::OkStatus();
  absl::StatusOr<Child*> c = Start(plan_->CurveEval(addresses_));
  if (!c.ok()) {
    sup_->StopAll();
    return c.status();
  }
  curve_eval_ = *c;
  return absl::OkStatus();
}

void ClusterRun::FinishCurveEval(Child& c) {
  if (&c == curve_eval_) curve_eval_ = nullptr;
  const ExitStatus& st = c.proc->exit_status();
  const ChildReport& r = reports_[&c];
  std::string why;
  if (!st.success()) {
    why = st.ToString();
  } else if (!r.eval) {
    why = "exit code 0 but no EVAL line with test_accuracy was printed";
  }
  if (!why.empty()) {
    sup_->Print(absl::StrCat("launch: warning: curve eval failed (", why,
                             "); training goes on"));
    return;
  }
  AddCurvePoint(absl::ToDoubleSeconds(c.started - train_start_),
                r.eval->test_accuracy);
}

void ClusterRun::AddCurvePoint(double seconds, double test_accuracy) {
  curve_.push_back({seconds, test_accuracy});
  sup_->Print(CurveLine(curve_.back()));
}

absl::Status ClusterRun::RunEval() {
  sup_->Print("launch: evaluating");
  absl::StatusOr<Child*> c = Start(plan_->FinalEval(addresses_));
  if (!c.ok()) {
    sup_->StopAll();
    return c.status();
  }
  eval_ = *c;
  while (true) {
    sup_->Pump(kPumpSlice);
    for (Child* exited : sup_->ReapExited()) {
      const ExitStatus& st = exited->proc->exit_status();
      if (exited->role() == TaskRole::kServer) {
        DP_RETURN_IF_ERROR(RestartOrFail(exited, ", during evaluation"));
        continue;
      }
      if (exited != eval_) continue;
      const ChildReport& r = reports_[exited];
      if (!st.success() && r.eval && !options_.save_params.empty()) {
        DP_RETURN_IF_ERROR(SaveIntoLogDir(*exited));
      } else if (!st.success()) {
        return sup_->Fail(*exited, st.ToString());
      } else if (!options_.save_params.empty()) {
        saved_params_ = options_.save_params;
      }
      if (!r.eval) {
        return sup_->Fail(*exited, "exit code 0 but no EVAL line was printed");
      }
      eval_end_ = absl::Now();
      AddCurvePoint(absl::ToDoubleSeconds(train_end_ - train_start_),
                    r.eval->test_accuracy);
      return absl::OkStatus();
    }
    DP_RETURN_IF_ERROR(sup_->CheckStopSignal());
  }
}

absl::Status ClusterRun::SaveIntoLogDir(const Child& failed) {
  const std::deque<std::string>& tail = failed.proc->tail();
  const std::string path =
      absl::StrCat(log_dir_, "/", options_.save_params.substr(
                                      options_.save_params.rfind('/') + 1));
  save_error_ = absl::StrCat("cannot write --save_params=",
                             options_.save_params, " (",
                             tail.empty() ? failed.proc->exit_status().ToString()
                                          : tail.back(),
                             ")");
  sup_->Print(absl::StrCat("launch: ", save_error_,
                           "; saving the parameters to ", path, " instead"));
  absl::StatusOr<Child*> c = Start(plan_->SaveEval(addresses_, path));
  if (!c.ok()) return c.status();
  while (true) {
    sup_->Pump(kPumpSlice);
    for (Child* exited : sup_->ReapExited()) {
      if (exited->role() == TaskRole::kServer) {
        DP_RETURN_IF_ERROR(RestartOrFail(exited, ", during evaluation"));
        continue;
      }
      if (exited != *c) continue;
      if (!exited->proc->exit_status().success()) {
        return sup_->Fail(**c, absl::StrCat(
                                   exited->proc->exit_status().ToString(),
                                   " after ", save_error_));
      }
      saved_params_ = path;
      return absl::OkStatus();
    }
    DP_RETURN_IF_ERROR(sup_->CheckStopSignal());
  }
}

void ClusterRun::StopServers() {
  sup_->Print("launch: stopping servers");
  sup_->StopAll();
  for (Child* s : servers_) {
    const ExitStatus& st = s->proc->exit_status();
    if (!st.success()) {
      sup_->Print(absl::StrCat("launch: warning: ", s->name(), " ended with ",
                               st.ToString(), " after SIGTERM"));
    }
  }
}

RunRecord ClusterRun::Record() const {
  RunRecord record;
  for (Child* w : workers_) record.done.push_back(*reports_.at(w).done);
  const ChildReport& eval = reports_.at(eval_);
  record.eval = *eval.eval;
  // Staleness: the eval run's SERVER_STATS, else whatever servers printed.
  record.server_stats = eval.server_stats;
  if (record.server_stats.empty()) {
    for (Child* srv : servers_) {
      const std::vector<JsonNumbers>& s = reports_.at(srv).server_stats;
      record.server_stats.insert(record.server_stats.end(), s.begin(),
                                 s.end());
    }
  }
  record.curve = curve_;
  record.wall_seconds = absl::ToDoubleSeconds(eval_end_ - start_);
  record.training_seconds = absl::ToDoubleSeconds(train_end_ - train_start_);
  record.log_dir = plan_->log_dir();
  return record;
}

absl::StatusOr<Summary> ClusterRun::Run() {
  DP_ASSIGN_OR_RETURN(log_dir_, PrepareLogDir(options_.log_dir));
  plan_ = std::make_unique<ClusterPlan>(options_, log_dir_);
  if (options_.standby) {  // A spec names every task before any starts.
    const int s = options_.servers;
    DP_ASSIGN_OR_RETURN(std::vector<int> ports,
                        FreeLoopbackPorts(2 * s + options_.workers));
    SpecPorts spec;
    spec.ps.assign(ports.begin(), ports.begin() + s);
    spec.standby.assign(ports.begin() + s, ports.begin() + 2 * s);
    spec.workers.assign(ports.begin() + 2 * s, ports.end());
    plan_->SetSpecPorts(std::move(spec));
  }
  SupervisorOptions so;
  so.log_dir = log_dir_;
  so.stop_grace = options_.stop_grace;
  so.stop_signal = stop_signal_;
  so.quiet = &ClusterRun::Quiet;
  sup_ = std::make_unique<Supervisor>(
      launcher_, out_, so,
      [this](const Child& c, const std::string& line) { OnLine(c, line); });
  sup_->Print(absl::StrCat(
      "launch: logs in ", log_dir_,
      options_.log_dir.empty() ? " (removed after a successful run; "
                                 "--log_dir keeps them)"
                               : ""));
  DP_RETURN_IF_ERROR(StartServersAndWaitForPorts());
  DP_RETURN_IF_ERROR(RunTraining());
  DP_RETURN_IF_ERROR(RunEval());
  StopServers();
  Summary summary = Summarize(options_, Record());
  summary.saved_params = saved_params_;
  return summary;
}

}  // namespace

absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   ProcessLauncher* launcher,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal) {
  absl::StatusOr<Summary> summary;
  std::string log_dir;
  std::vector<std::string> errors;  // Outputs written into log_dir instead.
  {
    ClusterRun run(options, launcher, out, stop_signal);
    summary = run.Run();
    log_dir = run.log_dir();
    if (absl::IsCancelled(summary.status()) && run.training()) {
      // The stop took the workers first, then the servers, each of which
      // wrote its final snapshot (Supervisor::StopAll).
      summary = absl::CancelledError(absl::StrCat(
          summary.status().message(),
          "; the servers wrote their snapshots and the workers their data "
          "positions into ", log_dir, "/ckpt; resume with:\n  ",
          ResumeCommand(options.command_line.empty()
                            ? std::vector<std::string>{"launch"}
                            : options.command_line,
                        log_dir)));
    }
    if (!run.save_error().empty()) {
      errors.push_back(absl::StrCat(run.save_error(), "; the parameters are in ",
                                    summary.ok() ? summary->saved_params : "",
                                    " instead"));
    }
  }  // Every child is reaped here.
  if (!summary.ok()) return summary;
  // The job is done: its snapshots and data positions resume nothing.
  {
    std::error_code ignored;
    std::filesystem::remove_all(absl::StrCat(log_dir, "/ckpt"), ignored);
  }
  // An output that cannot be written goes into the log folder, named.
  const auto write = [&](const char* flag, const std::string& path,
                         const std::string& contents) {
    if (path.empty()) return;
    absl::Status s = WriteFileAtomically(path, contents);
    if (s.ok()) return;
    const std::string instead =
        absl::StrCat(log_dir, "/", path.substr(path.rfind('/') + 1));
    absl::Status again = WriteFileAtomically(instead, contents);
    errors.push_back(absl::StrCat(
        "cannot write --", flag, "=", path, " (", s.message(), ")",
        again.ok() ? absl::StrCat("; written to ", instead, " instead") : ""));
  };
  write("curve_csv", options.curve_csv, CurveCsv(summary->curve));
  // A temporary log folder goes after a run that left nothing in it.
  const bool remove_logs = options.log_dir.empty() && errors.empty();
  if (remove_logs) summary->log_dir.clear();
  const std::string json = summary->ToJson();
  write("summary_json", options.summary_json, json + "\n");
  out << "SUMMARY " << json << '\n';
  out.flush();
  if (!errors.empty()) {
    return absl::FailedPreconditionError(absl::StrJoin(errors, "; "));
  }
  if (remove_logs) {
    std::error_code ignored;
    std::filesystem::remove_all(log_dir, ignored);
  }
  return summary;
}

absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal) {
  std::unique_ptr<ProcessLauncher> launcher = NewLocalProcessLauncher();
  return RunCluster(options, launcher.get(), out, stop_signal);
}

}  // namespace downpour
