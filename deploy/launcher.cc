#include "deploy/launcher.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "deploy/protocol.h"
#include "deploy/subprocess.h"

namespace downpour {
namespace {

// How many output lines of a failed child the failure message shows.
constexpr size_t kFailureTailLines = 20;
// Poll granularity of the supervision loop: bounds how late an exit, a
// timeout or a stop signal is noticed.
constexpr absl::Duration kPumpSlice = absl::Milliseconds(100);

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty() || IsDirectory(path)) return absl::OkStatus();
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    DP_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  }
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PrepareLogDir(const std::string& requested) {
  if (!requested.empty()) {
    DP_RETURN_IF_ERROR(MakeDirs(requested));
    return requested;
  }
  const char* tmp = getenv("TMPDIR");
  std::string tmpl = absl::StrCat((tmp && *tmp) ? tmp : "/tmp",
                                  "/downpour-launch-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a log directory from ", tmpl, ": ", strerror(errno)));
  }
  return tmpl;
}

// Returns the decimal port in `path`, or nullopt if the file is missing or
// not (yet) a valid port.
std::optional<int> ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  int port;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ss.str()), &port) ||
      port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << contents;
    f.close();
    if (!f) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", tmp));
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", strerror(e)));
  }
  return absl::OkStatus();
}


// The mean of `key` over the shards that report it, weighted by each shard's
// "pushes_applied" (a plain mean if any of them lacks it); nullopt if none
// reports it.
std::optional<double> WeightedMeanOverShards(
    const std::vector<JsonNumbers>& stats, const std::string& key) {
  double weighted = 0, weight = 0, plain = 0;
  int plain_n = 0;
  bool all_weighted = true;
  for (const JsonNumbers& st : stats) {
    auto it = st.find(key);
    if (it == st.end()) continue;
    plain += it->second;
    ++plain_n;
    if (auto w = st.find("pushes_applied"); w != st.end()) {
      weighted += it->second * w->second;
      weight += w->second;
    } else {
      all_weighted = false;
    }
  }
  if (plain_n == 0) return std::nullopt;
  return (all_weighted && weight > 0) ? weighted / weight : plain / plain_n;
}

std::optional<double> MaxOverShards(const std::vector<JsonNumbers>& stats,
                                    const std::string& key) {
  std::optional<double> max;
  for (const JsonNumbers& st : stats) {
    if (auto it = st.find(key); it != st.end()) {
      max = std::max(max.value_or(it->second), it->second);
    }
  }
  return max;
}

// kCurveEval: an evaluation on part of the test set while workers train.
enum class Role { kServer, kWorker, kEval, kCurveEval };

struct Child {
  std::string name;  // "ps 0", "worker 1", "eval": the output prefix.
  Role role = Role::kServer;
  int index = 0;
  std::unique_ptr<Subprocess> proc;
  absl::Time started;
  bool exit_handled = false;  // The supervision loop has seen the exit.
  std::optional<WorkerProgress> latest;  // Workers: last progress line.
  std::optional<JsonNumbers> done;       // Workers: the DONE record.
  std::optional<JsonNumbers> eval;       // Evals: the EVAL record.
  std::vector<JsonNumbers> server_stats;  // SERVER_STATS records printed.
};

// One run of the cluster. Owns every child; the destructor stops them.
class Cluster {
 public:
  Cluster(const LaunchOptions& options, std::ostream& out,
          const std::atomic<int>* stop_signal)
      : options_(options), out_(out), stop_signal_(stop_signal) {}

  ~Cluster() { StopAll(); }

  absl::StatusOr<Summary> Run();

 private:
  absl::StatusOr<Child*> StartChild(Role role, int index, std::string name,
                                    std::vector<std::string> argv);
  absl::Status StartServersAndWaitForPorts();
  absl::Status RunTraining();
  absl::Status RunEval();
  // Both evaluations' argv; `max_test_examples` 0 means the whole test set.
  std::vector<std::string> EvalArgv(int64_t max_test_examples,
                                    bool save_params) const;
  // Starts a curve evaluation when one is due and none is running.
  absl::Status MaybeStartCurveEval();
  // Handles the exit of a curve evaluation: a point or a warning.
  void FinishCurveEval(Child& c);
  void AddCurvePoint(double seconds, double test_accuracy);
  void StopServers();

  // Waits up to `timeout` for output, then handles every available line.
  void Pump(absl::Duration timeout);
  void Drain(Child& c);
  void HandleLine(Child& c, const std::string& line);
  void Print(absl::string_view line);
  // Children that exited since the last call (output drained).
  std::vector<Child*> ReapExited();
  // Cancelled if the stop signal is set (children are stopped first).
  absl::Status CheckStopSignal();
  // SIGTERM to every running child, up to stop_grace, then SIGKILL.
  void StopAll();
  // Stops every other child and returns the failure for `c`.
  absl::Status Fail(const Child& c, absl::string_view why);
  void MaybeReportRate();

  const LaunchOptions& options_;
  std::ostream& out_;
  const std::atomic<int>* const stop_signal_;  // Not owned; may be null.

  std::string log_dir_;
  std::vector<std::unique_ptr<Child>> children_;
  std::vector<Child*> servers_;
  std::vector<Child*> workers_;
  Child* eval_ = nullptr;
  Child* curve_eval_ = nullptr;  // The running curve evaluation, if any.
  absl::Time next_curve_eval_;
  std::vector<CurvePoint> curve_;
  std::vector<int> ports_;

  absl::Time start_;
  absl::Time train_start_;
  absl::Time train_end_;
  absl::Time eval_end_;
  absl::Time last_rate_report_;
};

void Cluster::Print(absl::string_view line) {
  out_ << line << '\n';
  out_.flush();
}

absl::StatusOr<Child*> Cluster::StartChild(Role role, int index,
                                           std::string name,
                                           std::vector<std::string> argv) {
  auto child = std::make_unique<Child>();
  child->role = role;
  child->index = index;
  child->name = std::move(name);
  std::string file = child->name;
  std::replace(file.begin(), file.end(), ' ', '_');
  SubprocessOptions sub;
  sub.argv = std::move(argv);
  sub.log_path = absl::StrCat(log_dir_, "/", file, ".log");
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(sub);
  if (!proc.ok()) {
    return absl::Status(proc.status().code(),
                        absl::StrCat("cannot start ", child->name, ": ",
                                     proc.status().message()));
  }
  child->proc = *std::move(proc);
  child->started = absl::Now();
  children_.push_back(std::move(child));
  return children_.back().get();
}

void Cluster::HandleLine(Child& c, const std::string& line) {
  if (absl::StartsWith(line, c.name + ":")) {
    Print(line);
  } else {
    Print(absl::StrCat(c.name, ": ", line));
  }
  switch (c.role) {
    case Role::kWorker:
      if (auto p = ParseProgressLine(line)) {
        c.latest = *p;
      } else if (auto d = ParseTaggedJson(line, "DONE")) {
        c.done = std::move(*d);
      }
      break;
    case Role::kEval:
    case Role::kCurveEval:
      if (auto e = ParseTaggedJson(line, "EVAL")) {
        c.eval = std::move(*e);
      } else if (auto s = ParseTaggedJson(line, "SERVER_STATS")) {
        c.server_stats.push_back(std::move(*s));
      }
      break;
    case Role::kServer:
      if (auto s = ParseTaggedJson(line, "SERVER_STATS")) {
        c.server_stats.push_back(std::move(*s));
      }
      break;
  }
}

void Cluster::Drain(Child& c) {
  std::vector<std::string> lines;
  c.proc->ReadAvailable(&lines);
  for (const std::string& line : lines) HandleLine(c, line);
}

void Cluster::Pump(absl::Duration timeout) {
  std::vector<Subprocess*> procs;
  for (auto& c : children_) procs.push_back(c->proc.get());
  Subprocess::PollOutput(procs, timeout);
  for (auto& c : children_) Drain(*c);
}

std::vector<Child*> Cluster::ReapExited() {
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

void Cluster::StopAll() {
  bool any = false;
  for (auto& c : children_) {
    if (!c->proc->CheckExited()) {
      c->proc->Signal(SIGTERM).IgnoreError();
      any = true;
    }
  }
  if (!any) return;
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  while (absl::Now() < deadline) {
    bool all_exited = true;
    for (auto& c : children_) all_exited &= c->proc->CheckExited();
    if (all_exited) break;
    Pump(std::min(kPumpSlice, deadline - absl::Now()));
  }
  for (auto& c : children_) {
    if (!c->proc->CheckExited()) {
      Print(absl::StrCat("launch: ", c->name, " did not stop within ",
                         absl::FormatDuration(options_.stop_grace),
                         " of SIGTERM; sending SIGKILL"));
      std::vector<std::string> lines;
      c->proc->Terminate(absl::ZeroDuration(), &lines);
      for (const std::string& line : lines) HandleLine(*c, line);
    }
    Drain(*c);
  }
}

absl::Status Cluster::Fail(const Child& c, absl::string_view why) {
  StopAll();
  const std::deque<std::string>& tail = c.proc->tail();
  size_t first = tail.size() > kFailureTailLines
                     ? tail.size() - kFailureTailLines
                     : 0;
  std::string msg = absl::StrCat(c.name, " failed (", why, "); last lines:");
  if (tail.empty()) absl::StrAppend(&msg, "\n    (no output)");
  for (size_t i = first; i < tail.size(); ++i) {
    absl::StrAppend(&msg, "\n    ", tail[i]);
  }
  absl::StrAppend(&msg, "\n(full logs in ", log_dir_, ")");
  return absl::AbortedError(msg);
}

absl::Status Cluster::CheckStopSignal() {
  if (stop_signal_ == nullptr) return absl::OkStatus();
  int sig = stop_signal_->load();
  if (sig == 0) return absl::OkStatus();
  Print(absl::StrCat("launch: got signal ", sig, "; stopping all children"));
  StopAll();
  return absl::CancelledError(absl::StrCat("interrupted by signal ", sig));
}

absl::Status Cluster::StartServersAndWaitForPorts() {
  start_ = absl::Now();
  for (int k = 0; k < options_.servers; ++k) {
    const std::string port_file =
        absl::StrCat(log_dir_, "/ps_", k, ".port");
    unlink(port_file.c_str());
    std::vector<std::string> argv = {
        options_.ps_server_bin,
        "--port=0",
        absl::StrCat("--port_file=", port_file),
        absl::StrCat("--shard_index=", k),
        absl::StrCat("--num_shards=", options_.servers),
        absl::StrCat("--optimizer=", options_.optimizer),
        absl::StrCat("--lr=", options_.lr),
        absl::StrCat("--mode=", options_.mode),
        absl::StrCat("--num_workers=", options_.ServerWorkers()),
        absl::StrCat("--replicas_to_aggregate=",
                     options_.replicas_to_aggregate),
        absl::StrCat("--staleness=", options_.staleness),
        absl::StrCat("--staleness_aware=",
                     options_.staleness_aware ? "true" : "false"),
        absl::StrCat("--drop_stale_threshold=",
                     options_.drop_stale_threshold),
        absl::StrCat("--sync_timeout_s=", options_.sync_timeout_s),
        absl::StrCat("--min_replicas=", options_.min_replicas),
    };
    argv.insert(argv.end(), options_.server_args.begin(),
                options_.server_args.end());
    DP_ASSIGN_OR_RETURN(Child * c, StartChild(Role::kServer, k,
                                              absl::StrCat("ps ", k),
                                              std::move(argv)));
    servers_.push_back(c);
  }
  ports_.assign(options_.servers, 0);
  const absl::Time deadline = start_ + options_.startup_timeout;
  int ready = 0;
  while (true) {
    for (int k = 0; k < options_.servers; ++k) {
      if (ports_[k] != 0) continue;
      if (std::optional<int> port =
              ReadPortFile(absl::StrCat(log_dir_, "/ps_", k, ".port"))) {
        ports_[k] = *port;
        ++ready;
        Print(absl::StrCat("launch: server ", k, " listening on 127.0.0.1:",
                           *port));
      }
    }
    if (ready == options_.servers) return absl::OkStatus();
    for (Child* c : ReapExited()) {
      return Fail(*c, absl::StrCat(c->proc->exit_status().ToString(),
                                   ", during startup"));
    }
    DP_RETURN_IF_ERROR(CheckStopSignal());
    if (absl::Now() >= deadline) {
      for (int k = 0; k < options_.servers; ++k) {
        if (ports_[k] == 0) {
          return Fail(*servers_[k],
                      absl::StrCat("no port file ", log_dir_, "/ps_", k,
                                   ".port after ",
                                   absl::FormatDuration(
                                       options_.startup_timeout)));
        }
      }
    }
    Pump(kPumpSlice);
  }
}

void Cluster::MaybeReportRate() {
  const absl::Time now = absl::Now();
  if (now - last_rate_report_ < options_.rate_report_interval) return;
  double rate = 0;
  int n = 0;
  int64_t step = 0;
  for (Child* w : workers_) {
    if (w->exit_handled || !w->latest) continue;
    rate += w->latest->examples_per_sec;
    step = std::max(step, w->latest->step);
    ++n;
  }
  if (n == 0) return;
  last_rate_report_ = now;
  Print(absl::StrFormat("cluster: %.1f examples/sec (%d workers, step %d)",
                        rate, n, step));
}

absl::Status Cluster::RunTraining() {
  std::vector<std::string> hosts;
  for (int port : ports_) hosts.push_back(absl::StrCat("127.0.0.1:", port));
  const std::string ps_hosts = absl::StrJoin(hosts, ",");
  train_start_ = absl::Now();
  last_rate_report_ = train_start_;
  next_curve_eval_ = train_start_ + options_.eval_every;
  for (int i = 0; i < options_.workers; ++i) {
    std::vector<std::string> argv = {
        options_.ps_worker_bin,
        absl::StrCat("--ps_hosts=", ps_hosts),
        absl::StrCat("--worker_index=", i),
        absl::StrCat("--num_workers=", options_.workers),
        "--task=train",
        absl::StrCat("--mode=", options_.mode),
        absl::StrCat("--epochs=", options_.epochs),
        absl::StrCat("--batch_size=", options_.batch_size),
        absl::StrCat("--seed=", options_.seed),
        absl::StrCat("--data_dir=", options_.data_dir),
        absl::StrCat("--n_fetch=", options_.n_fetch),
        absl::StrCat("--n_push=", options_.n_push),
        absl::StrCat("--device=", options_.device),
        absl::StrCat("--gpus=", options_.gpus),
        absl::StrCat("--replicas=", options_.replicas),
        absl::StrCat("--local_aggregation=", options_.local_aggregation),
    };
    if (options_.max_train_examples > 0) {
      argv.push_back(absl::StrCat("--max_train_examples=",
                                  options_.max_train_examples));
    }
    argv.insert(argv.end(), options_.worker_args.begin(),
                options_.worker_args.end());
    absl::StatusOr<Child*> c = StartChild(Role::kWorker, i,
                                          absl::StrCat("worker ", i),
                                          std::move(argv));
    if (!c.ok()) {
      StopAll();
      return c.status();
    }
    workers_.push_back(*c);
  }
  int running = options_.workers;
  while (running > 0) {
    Pump(kPumpSlice);
    for (Child* c : ReapExited()) {
      const ExitStatus& st = c->proc->exit_status();
      if (c->role == Role::kServer) {
        return Fail(*c, absl::StrCat(st.ToString(),
                                     ", while workers were running"));
      }
      if (c->role == Role::kCurveEval) {
        FinishCurveEval(*c);
        continue;
      }
      if (!st.success()) return Fail(*c, st.ToString());
      if (!c->done) {
        return Fail(*c, "exit code 0 but no DONE line was printed");
      }
      --running;
    }
    DP_RETURN_IF_ERROR(CheckStopSignal());
    MaybeReportRate();
    if (running > 0) DP_RETURN_IF_ERROR(MaybeStartCurveEval());
  }
  train_end_ = absl::Now();
  Print(absl::StrFormat("launch: training done in %.1f s",
                        absl::ToDoubleSeconds(train_end_ - train_start_)));
  // A curve evaluation still running measures parameters from before the
  // end of training: let it finish (its client's RPC deadlines bound this)
  // rather than lose the point, and keep it off the final evaluation's CPUs.
  while (curve_eval_ != nullptr) {
    Pump(kPumpSlice);
    for (Child* c : ReapExited()) {
      if (c->role == Role::kServer) {
        return Fail(*c, absl::StrCat(c->proc->exit_status().ToString(),
                                     ", after training"));
      }
      if (c->role == Role::kCurveEval) FinishCurveEval(*c);
    }
    DP_RETURN_IF_ERROR(CheckStopSignal());
  }
  return absl::OkStatus();
}

std::vector<std::string> Cluster::EvalArgv(int64_t max_test_examples,
                                           bool save_params) const {
  std::vector<std::string> hosts;
  for (int port : ports_) hosts.push_back(absl::StrCat("127.0.0.1:", port));
  std::vector<std::string> argv = {
      options_.ps_worker_bin,
      "--task=eval",
      absl::StrCat("--mode=", options_.mode),
      absl::StrCat("--ps_hosts=", absl::StrJoin(hosts, ",")),
      absl::StrCat("--data_dir=", options_.data_dir),
  };
  if (max_test_examples > 0) {
    argv.push_back(absl::StrCat("--max_test_examples=", max_test_examples));
  }
  if (save_params && !options_.save_params.empty()) {
    argv.push_back(absl::StrCat("--save_params=", options_.save_params));
  }
  argv.insert(argv.end(), options_.worker_args.begin(),
              options_.worker_args.end());
  return argv;
}

absl::Status Cluster::MaybeStartCurveEval() {
  if (options_.eval_every <= absl::ZeroDuration()) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now < next_curve_eval_) return absl::OkStatus();
  // Ticks that pass while an evaluation runs (or while the loop is late) are
  // skipped, not made up for.
  while (next_curve_eval_ <= now) next_curve_eval_ += options_.eval_every;
  if (curve_eval_ != nullptr) return absl::OkStatus();
  absl::StatusOr<Child*> c =
      StartChild(Role::kCurveEval, 0, "curve eval",
                 EvalArgv(options_.eval_examples, /*save_params=*/false));
  if (!c.ok()) {
    StopAll();
    return c.status();
  }
  curve_eval_ = *c;
  return absl::OkStatus();
}

void Cluster::FinishCurveEval(Child& c) {
  if (&c == curve_eval_) curve_eval_ = nullptr;
  const ExitStatus& st = c.proc->exit_status();
  std::string why;
  if (!st.success()) {
    why = st.ToString();
  } else if (!c.eval || !c.eval->count("test_accuracy")) {
    why = "exit code 0 but no EVAL line with test_accuracy was printed";
  }
  if (!why.empty()) {
    Print(absl::StrCat("launch: warning: curve eval failed (", why,
                       "); training goes on"));
    return;
  }
  AddCurvePoint(absl::ToDoubleSeconds(c.started - train_start_),
                c.eval->at("test_accuracy"));
}

void Cluster::AddCurvePoint(double seconds, double test_accuracy) {
  curve_.push_back({seconds, test_accuracy});
  Print(absl::StrFormat("curve: t=%.1f s test_accuracy=%.4f", seconds,
                        test_accuracy));
}

absl::Status Cluster::RunEval() {
  Print("launch: evaluating");
  absl::StatusOr<Child*> c = StartChild(Role::kEval, 0, "eval",
                                        EvalArgv(0, /*save_params=*/true));
  if (!c.ok()) {
    StopAll();
    return c.status();
  }
  eval_ = *c;
  while (true) {
    Pump(kPumpSlice);
    for (Child* exited : ReapExited()) {
      const ExitStatus& st = exited->proc->exit_status();
      if (exited->role == Role::kServer) {
        return Fail(*exited, absl::StrCat(st.ToString(),
                                          ", during evaluation"));
      }
      if (exited != eval_) continue;
      if (!st.success()) return Fail(*exited, st.ToString());
      if (!exited->eval) {
        return Fail(*exited, "exit code 0 but no EVAL line was printed");
      }
      eval_end_ = absl::Now();
      if (auto it = exited->eval->find("test_accuracy");
          it != exited->eval->end()) {
        AddCurvePoint(absl::ToDoubleSeconds(train_end_ - train_start_),
                      it->second);
      }
      return absl::OkStatus();
    }
    DP_RETURN_IF_ERROR(CheckStopSignal());
  }
}

void Cluster::StopServers() {
  Print("launch: stopping servers");
  StopAll();
  for (Child* s : servers_) {
    const ExitStatus& st = s->proc->exit_status();
    if (!st.success()) {
      Print(absl::StrCat("launch: warning: ", s->name, " ended with ",
                         st.ToString(), " after SIGTERM"));
    }
  }
}

absl::StatusOr<Summary> Cluster::Run() {
  DP_ASSIGN_OR_RETURN(log_dir_, PrepareLogDir(options_.log_dir));
  Print(absl::StrCat("launch: logs in ", log_dir_));
  DP_RETURN_IF_ERROR(StartServersAndWaitForPorts());
  DP_RETURN_IF_ERROR(RunTraining());
  DP_RETURN_IF_ERROR(RunEval());
  StopServers();

  Summary s;
  s.mode = options_.mode;
  s.servers = options_.servers;
  s.workers = options_.workers;
  s.epochs = options_.epochs;
  s.batch_size = options_.batch_size;
  s.optimizer = options_.optimizer;
  s.lr = options_.lr;
  double loss_sum = 0;
  int loss_n = 0;
  for (Child* w : workers_) {
    const JsonNumbers& d = *w->done;
    if (auto it = d.find("steps"); it != d.end()) {
      s.steps += static_cast<int64_t>(std::llround(it->second));
    }
    if (auto it = d.find("examples"); it != d.end()) {
      s.examples += static_cast<int64_t>(std::llround(it->second));
    }
    if (auto it = d.find("final_loss"); it != d.end()) {
      loss_sum += it->second;
      ++loss_n;
    }
  }
  s.final_loss = loss_n > 0 ? loss_sum / loss_n : NAN;
  s.wall_seconds = absl::ToDoubleSeconds(eval_end_ - start_);
  s.training_seconds = absl::ToDoubleSeconds(train_end_ - train_start_);
  s.examples_per_sec =
      s.training_seconds > 0 ? s.examples / s.training_seconds : 0;
  const JsonNumbers& e = *eval_->eval;
  s.test_accuracy = e.count("test_accuracy") ? e.at("test_accuracy") : NAN;
  s.test_loss = e.count("test_loss") ? e.at("test_loss") : NAN;
  s.curve = curve_;
  s.time_to_85 = TimeToAccuracy(s.curve, 0.85);
  s.time_to_88 = TimeToAccuracy(s.curve, 0.88);

  // Staleness: the eval run's SERVER_STATS, else whatever servers printed.
  std::vector<JsonNumbers> stats = eval_->server_stats;
  if (stats.empty()) {
    for (Child* srv : servers_) {
      stats.insert(stats.end(), srv->server_stats.begin(),
                   srv->server_stats.end());
    }
  }
  s.staleness_mean = WeightedMeanOverShards(stats, "staleness_mean");
  s.staleness_p50 = WeightedMeanOverShards(stats, "staleness_p50");
  s.staleness_max = MaxOverShards(stats, "staleness_max");
  s.staleness_p99 = MaxOverShards(stats, "staleness_p99");
  for (const JsonNumbers& st : stats) {
    if (auto it = st.find("dropped_stale"); it != st.end()) {
      s.dropped_stale = s.dropped_stale.value_or(0) +
                        static_cast<int64_t>(std::llround(it->second));
    }
  }
  s.log_dir = log_dir_;
  return s;
}

}  // namespace

std::string Summary::ToJson() const {
  JsonWriter w;
  w.Add("mode", mode)
      .Add("servers", servers)
      .Add("workers", workers)
      .Add("epochs", epochs)
      .Add("batch_size", batch_size)
      .Add("optimizer", optimizer)
      .Add("lr", lr)
      .Add("steps", steps)
      .Add("examples", examples)
      .Add("wall_seconds", wall_seconds)
      .Add("training_seconds", training_seconds)
      .Add("examples_per_sec", examples_per_sec)
      .Add("final_loss", final_loss)
      .Add("test_accuracy", test_accuracy)
      .Add("test_loss", test_loss)
      .Add("time_to_85", time_to_85)
      .Add("time_to_88", time_to_88);
  if (staleness_mean) w.Add("staleness_mean", *staleness_mean);
  if (staleness_max) w.Add("staleness_max", *staleness_max);
  if (staleness_p50) w.Add("staleness_p50", *staleness_p50);
  if (staleness_p99) w.Add("staleness_p99", *staleness_p99);
  if (dropped_stale) w.Add("dropped_stale", *dropped_stale);
  w.Add("log_dir", log_dir);
  return w.str();
}

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.mode != "async" && o.mode != "sync" && o.mode != "ssp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --mode=", o.mode, "; valid modes: async, sync, ssp"));
  }
  auto at_least_one = [](const char* flag, int64_t v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be >= 1, got ", v));
  };
  DP_RETURN_IF_ERROR(at_least_one("servers", o.servers));
  DP_RETURN_IF_ERROR(at_least_one("workers", o.workers));
  DP_RETURN_IF_ERROR(at_least_one("epochs", o.epochs));
  DP_RETURN_IF_ERROR(at_least_one("batch_size", o.batch_size));
  DP_RETURN_IF_ERROR(at_least_one("n_fetch", o.n_fetch));
  DP_RETURN_IF_ERROR(at_least_one("n_push", o.n_push));
  DP_RETURN_IF_ERROR(at_least_one("replicas", o.replicas));
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, got '", o.device, "'"));
  }
  if (o.local_aggregation != "sum" && o.local_aggregation != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_aggregation must be sum or none, got '", o.local_aggregation,
        "'"));
  }
  if (!o.gpus.empty() && o.device == "cpu") {
    return absl::InvalidArgumentError("--gpus needs --device=cuda or auto");
  }
  if (o.replicas_to_aggregate < 0 || o.replicas_to_aggregate > o.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas_to_aggregate must be in [0, --workers=", o.workers,
        "] (0 = all workers), got ", o.replicas_to_aggregate));
  }
  if (o.min_replicas < 1 || o.min_replicas > o.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_replicas must be in [1, --workers=", o.workers,
                     "], got ", o.min_replicas));
  }
  if (o.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness must be >= 0, got ", o.staleness));
  }
  if (o.staleness_aware && o.mode != "async") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staleness_aware applies to --mode=async, not --mode=", o.mode));
  }
  if (o.drop_stale_threshold < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drop_stale_threshold must be >= 0 (0 = off), got ",
                     o.drop_stale_threshold));
  }
  if (!std::isfinite(o.sync_timeout_s) || o.sync_timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync_timeout_s must be a positive number, got ", o.sync_timeout_s));
  }
  if (o.eval_every < absl::ZeroDuration() ||
      o.eval_every == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "--eval_every_s must be a finite number >= 0 (0 = off)");
  }
  DP_RETURN_IF_ERROR(at_least_one("eval_examples", o.eval_examples));
  if (o.max_train_examples < 0) {
    return absl::InvalidArgumentError(
        "--max_train_examples must be >= 0 (0 = all)");
  }
  if (!std::isfinite(o.lr) || o.lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be a positive number, got ", o.lr));
  }
  if (o.optimizer.empty()) {
    return absl::InvalidArgumentError("--optimizer must not be empty");
  }
  if (!IsDirectory(o.data_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_dir=", o.data_dir, " is not a directory (fetch the data set "
        "or point --data_dir at it)"));
  }
  if (o.startup_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--startup_timeout_s must be > 0");
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"ps_server_bin",
                                                   o.ps_server_bin},
        std::pair<const char*, const std::string&>{"ps_worker_bin",
                                                   o.ps_worker_bin}}) {
    if (!IsExecutableFile(path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path, " is not an executable file"));
    }
  }
  return absl::OkStatus();
}

double TimeToAccuracy(const std::vector<CurvePoint>& curve,
                      double threshold) {
  for (const CurvePoint& p : curve) {
    if (p.test_accuracy >= threshold) return p.seconds;
  }
  return -1;
}

absl::StatusOr<std::string> FindSiblingBinary(
    const std::vector<std::string>& exe_paths, absl::string_view relpath) {
  std::vector<std::string> tried;
  auto try_path = [&tried](std::string p) -> std::optional<std::string> {
    if (std::find(tried.begin(), tried.end(), p) != tried.end()) {
      return std::nullopt;
    }
    tried.push_back(p);
    if (IsExecutableFile(p)) return p;
    return std::nullopt;
  };
  const char* runfiles = getenv("RUNFILES_DIR");
  if (runfiles != nullptr && *runfiles != '\0') {
    if (auto p = try_path(absl::StrCat(runfiles, "/downpour/", relpath))) {
      return *p;
    }
  }
  for (const std::string& exe : exe_paths) {
    if (exe.empty()) continue;
    if (auto p = try_path(absl::StrCat(exe, ".runfiles/downpour/", relpath))) {
      return *p;
    }
    size_t slash = exe.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : exe.substr(0, slash);
    if (auto p = try_path(absl::StrCat(dir, "/../", relpath))) return *p;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", relpath, "; tried: ", absl::StrJoin(tried, ", ")));
}

absl::StatusOr<Summary> RunCluster(const LaunchOptions& options,
                                   std::ostream& out,
                                   const std::atomic<int>* stop_signal) {
  absl::StatusOr<Summary> summary;
  {
    Cluster cluster(options, out, stop_signal);
    summary = cluster.Run();
  }  // Every child is reaped here.
  if (!summary.ok()) return summary;
  const std::string json = summary->ToJson();
  out << "SUMMARY " << json << '\n';
  out.flush();
  if (!options.summary_json.empty()) {
    DP_RETURN_IF_ERROR(WriteFileAtomically(options.summary_json, json + "\n"));
  }
  if (!options.curve_csv.empty()) {
    std::string csv = "seconds,test_accuracy\n";
    for (const CurvePoint& p : summary->curve) {
      absl::StrAppendFormat(&csv, "%.3f,%.6g\n", p.seconds, p.test_accuracy);
    }
    DP_RETURN_IF_ERROR(WriteFileAtomically(options.curve_csv, csv));
  }
  return summary;
}

int LaunchOptions::ReplicasPerWorker() const {
  if (gpus.empty()) return replicas;
  return static_cast<int>(
      std::vector<std::string>(absl::StrSplit(gpus, ',', absl::SkipEmpty()))
          .size());
}

}  // namespace downpour
