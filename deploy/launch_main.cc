// launch: runs a Downpour cluster (parameter servers + workers + evaluation)
// on localhost. See deploy/launcher.h for the behaviour and output contract.
//
//   bazel run //deploy:launch -- --servers=2 --workers=4 --epochs=1
//
// Exit codes: 0 success; 2 bad flags / missing binaries; 130 interrupted
// (SIGINT/SIGTERM); 1 any other failure.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/train_mode.h"
#include "common/exit_codes.h"  // Recovery.
#include "deploy/launcher.h"
#include "deploy/lr_rules.h"
#include "deploy/launch_security.h"  // Security and operations.
#include "rpc/security_flags.h"

ABSL_FLAG(int, servers, 2, "Number of parameter-server shards (>= 1).");
ABSL_FLAG(int, workers, 2, "Number of training worker processes (>= 1).");
ABSL_FLAG(std::string, device, "auto",
          "Workers' device: auto (CUDA when a GPU is usable, else CPU), cpu "
          "or cuda.");
ABSL_FLAG(std::string, gpus, "",
          "GPUs of each worker process, one replica per entry: 0,1,2,3 on a "
          "4-GPU host; 0,0 runs two replicas on GPU 0.");
ABSL_FLAG(int, replicas, 1, "CPU replicas per worker process (no --gpus).");
ABSL_FLAG(std::string, local_aggregation, "sum",
          "Replicas of a process: sum (push their mean once) or none (each "
          "pushes on its own).");
ABSL_FLAG(std::string, mode, "async",
          "Training mode: async (Downpour), sync (synchronous steps) or ssp "
          "(stale-synchronous parallel, bounded by --staleness). Passed to "
          "servers, workers and evaluations.");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "sync: gradients per step; 0 = all workers, fewer = backup "
          "workers. Passed to the servers.");
ABSL_FLAG(int, staleness, 2,
          "ssp: clocks a worker may run ahead of the slowest (>= 0).");
ABSL_FLAG(bool, staleness_aware, false,
          "async only: the servers divide each update's step by its "
          "staleness.");
ABSL_FLAG(int64_t, drop_stale_threshold, 0,
          "async: the servers drop updates staler than this; 0 = never.");
ABSL_FLAG(double, sync_timeout_s, 30,
          "sync/ssp: seconds a server waits for a missing worker before "
          "going on without it.");
ABSL_FLAG(int, min_replicas, 1,
          "sync/ssp: fewest workers to go on with; below it the job aborts.");
ABSL_FLAG(double, eval_every_s, 0,
          "Accuracy-vs-time curve: every N seconds of training, evaluate the "
          "servers' parameters on --eval_examples test examples (skipped "
          "while the previous one runs); 0 = off.");
ABSL_FLAG(int64_t, eval_examples, 5000,
          "Test examples of each --eval_every_s evaluation (>= 1).");
ABSL_FLAG(std::string, curve_csv, "",
          "If set, the accuracy-vs-time curve (the --eval_every_s points and "
          "the final evaluation) is written here as seconds,test_accuracy.");
ABSL_FLAG(int, epochs, 3, "Passes over the training set per worker.");
ABSL_FLAG(int, batch_size, 64, "Mini-batch size per worker step.");
ABSL_FLAG(double, lr, 0,
          "Learning rate of the server-side optimizer for one worker's "
          "gradient; 0 picks the optimizer's default (adam 0.001, adagrad "
          "0.05, momentum 0.02, sgd 0.05). --lr_schedule=auto scales it for "
          "sync's mean of W gradients.");
ABSL_FLAG(std::string, optimizer, downpour::kDefaultOptimizer,
          "Server-side optimizer name, passed to the servers.");
ABSL_FLAG(std::string, lr_schedule, "auto",
          "Learning-rate rules given to the servers: 'auto' (sync: lr x the "
          "gradients averaged per step; warm-up over 5% of the job's updates, "
          "then cosine decay to 0 at its last; see README 'Learning-rate "
          "rules') or 'none' (a constant lr). --server_args flags win.");
ABSL_FLAG(double, label_smoothing, downpour::kDefaultLabelSmoothing,
          "Label smoothing of the workers' training loss, in [0, 1) (0 = "
          "plain cross-entropy); see README 'Learning-rate rules'.");
ABSL_FLAG(std::string, augment, downpour::kDefaultAugment,
          "Training-image augmentation of the workers: none, flip (random "
          "horizontal flips) or crop_flip (also random crops, padding 4); "
          "see README 'Learning-rate rules'.");
ABSL_FLAG(int64_t, seed, 1, "Random seed, passed to the workers.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory holding the data set (must exist).");
ABSL_FLAG(std::string, save_params, "",
          "If set, the evaluation run saves the trained parameters here.");
ABSL_FLAG(std::string, summary_json, "",
          "If set, the SUMMARY JSON is also written to this file.");
ABSL_FLAG(int, n_fetch, 1, "Steps between parameter fetches (workers).");
ABSL_FLAG(int, n_push, 1, "Steps between gradient pushes (workers).");
ABSL_FLAG(int64_t, max_train_examples, 0,
          "Cap on training examples per worker; 0 = all.");
ABSL_FLAG(std::string, server_args, "",
          "Extra space-separated flags appended to each ps_server.");
ABSL_FLAG(std::string, worker_args, "",
          "Extra space-separated flags appended to each ps_worker "
          "(training and evaluation).");
ABSL_FLAG(std::string, ps_server_bin, "",
          "ps_server binary; default: found next to this launcher "
          "(<exe>.runfiles/downpour/server/ps_server or "
          "<exe dir>/../server/ps_server).");
ABSL_FLAG(std::string, ps_worker_bin, "",
          "ps_worker binary; default: found like --ps_server_bin.");
ABSL_FLAG(std::string, log_dir, "",
          "Directory for per-child logs and port files; default: a fresh "
          "temporary directory.");
ABSL_FLAG(int, startup_timeout_s, 60,
          "Seconds to wait for every server to write its port file.");

// Recovery (issue 14): supervise instead of tearing down.
ABSL_FLAG(int, max_restarts, 0,
          "Restart a server (same port, from its snapshot) or a worker (same "
          "index) that died, up to N times per child; 0: a death ends the "
          "job. With N > 0 servers snapshot to <log_dir>/ckpt/shard<k>.");
ABSL_FLAG(double, checkpoint_every_s, 2,
          "With --max_restarts > 0: each server's snapshot interval.");

// Security and operations (README "Security", "Observability"). The TLS and
// token flags (rpc/security_flags.cc) are passed on to every child.
ABSL_FLAG(bool, secure, false,
          "Make a CA, certificates and a token for this job (deploy/"
          "make_certs.sh, into <log_dir>/certs or a fresh temporary "
          "directory) and use them: mutual TLS and a token on every call.");
ABSL_FLAG(int, metrics_base_port, -1,
          "Prometheus endpoints: server k on this port + k, worker i on this "
          "port + servers + i (deploy/prometheus.yml scrapes 9400-9403); -1 off.");

namespace {

// Set by the SIGINT/SIGTERM handler, polled by RunCluster. Signal handlers
// can only reach process-wide state, so this one global lives in main's file.
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

// Recovery (issue 14): the rule of common/exit_codes.h (0 done, 2 fatal,
// 3 retryable: a child failed, 1 other), and 130 when interrupted by
// SIGINT/SIGTERM.
int ExitCodeFor(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) return 130;
  return downpour::ExitCodeForStatus(s);
}

std::vector<std::string> SplitArgs(const std::string& s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

// Copies the flags into *o (all but --mode). False, after printing why, for
// a flag no LaunchOptions value can hold.
bool ReadFlags(downpour::LaunchOptions* o) {
  o->servers = absl::GetFlag(FLAGS_servers);
  o->workers = absl::GetFlag(FLAGS_workers);
  o->device = absl::GetFlag(FLAGS_device);
  o->gpus = absl::GetFlag(FLAGS_gpus);
  o->replicas = absl::GetFlag(FLAGS_replicas);
  o->local_aggregation = absl::GetFlag(FLAGS_local_aggregation);
  o->replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  o->staleness = absl::GetFlag(FLAGS_staleness);
  o->staleness_aware = absl::GetFlag(FLAGS_staleness_aware);
  o->drop_stale_threshold = absl::GetFlag(FLAGS_drop_stale_threshold);
  o->sync_timeout_s = absl::GetFlag(FLAGS_sync_timeout_s);
  o->min_replicas = absl::GetFlag(FLAGS_min_replicas);
  const double eval_every_s = absl::GetFlag(FLAGS_eval_every_s);
  if (!std::isfinite(eval_every_s) || eval_every_s < 0) {
    std::cerr << "launch: --eval_every_s must be a finite number >= 0 "
                 "(0 = off), got " << eval_every_s << "\n";
    return false;
  }
  o->eval_every = absl::Seconds(eval_every_s);
  o->eval_examples = absl::GetFlag(FLAGS_eval_examples);
  o->curve_csv = absl::GetFlag(FLAGS_curve_csv);
  o->epochs = absl::GetFlag(FLAGS_epochs);
  o->batch_size = absl::GetFlag(FLAGS_batch_size);
  o->lr = absl::GetFlag(FLAGS_lr);
  o->optimizer = absl::GetFlag(FLAGS_optimizer);
  o->lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o->label_smoothing = absl::GetFlag(FLAGS_label_smoothing);
  o->augment = absl::GetFlag(FLAGS_augment);
  o->seed = absl::GetFlag(FLAGS_seed);
  o->data_dir = absl::GetFlag(FLAGS_data_dir);
  o->save_params = absl::GetFlag(FLAGS_save_params);
  o->summary_json = absl::GetFlag(FLAGS_summary_json);
  o->n_fetch = absl::GetFlag(FLAGS_n_fetch);
  o->n_push = absl::GetFlag(FLAGS_n_push);
  o->max_train_examples = absl::GetFlag(FLAGS_max_train_examples);
  o->server_args = SplitArgs(absl::GetFlag(FLAGS_server_args));
  o->worker_args = SplitArgs(absl::GetFlag(FLAGS_worker_args));
  o->log_dir = absl::GetFlag(FLAGS_log_dir);
  o->startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  o->max_restarts = absl::GetFlag(FLAGS_max_restarts);  // Recovery.
  o->checkpoint_every =
      absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_s));

  return true;
}

// Fills in the binaries not given by flag. False, after printing what to do,
// when one cannot be found.
bool FindBinaries(const char* argv0, downpour::LaunchOptions* o) {
  const std::vector<std::string> exe_paths = {SelfExe(), argv0};
  o->ps_server_bin = absl::GetFlag(FLAGS_ps_server_bin);
  o->ps_worker_bin = absl::GetFlag(FLAGS_ps_worker_bin);
  for (auto [bin, relpath, label, flag] :
       {std::make_tuple(&o->ps_server_bin, "server/ps_server",
                        "//server:ps_server", "ps_server_bin"),
        std::make_tuple(&o->ps_worker_bin, "worker/ps_worker",
                        "//worker:ps_worker", "ps_worker_bin")}) {
    if (!bin->empty()) continue;
    absl::StatusOr<std::string> found =
        downpour::FindSiblingBinary(exe_paths, relpath);
    if (!found.ok()) {
      std::cerr << "launch: " << found.status().message()
                << "\n  build it (bazel build " << label << ") or pass --"
                << flag << "\n";
      return false;
    }
    *bin = *found;
  }

  return true;
}

// Security and operations: the flags every child gets. False, after
// printing why, for bad files or a failed --secure.
bool ReadSecurityFlags(const char* argv0, downpour::LaunchOptions* o) {
  o->metrics_base_port = absl::GetFlag(FLAGS_metrics_base_port);
  absl::StatusOr<downpour::TransportSecurityOptions> s =
      downpour::SecurityOptionsFromFlags();
  if (s.ok() && absl::GetFlag(FLAGS_secure)) {
    if (s->mode != downpour::TransportSecurityOptions::Mode::kInsecure ||
        !s->auth_token_file.empty()) {
      std::cerr << "launch: --secure makes its own certificates and token; "
                   "give either --secure or --tls_*/--auth_token_file\n";
      return false;
    }
    absl::StatusOr<std::string> script = downpour::FindSiblingBinary(
        {SelfExe(), argv0}, "deploy/make_certs.sh");
    std::string dir = o->log_dir + "/certs";
    if (o->log_dir.empty()) {
      const char* tmp = getenv("TMPDIR");
      std::string tmpl = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") +
                         "/downpour-certs-XXXXXX";
      dir = mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
    }
    s = !script.ok() ? script.status()
        : dir.empty() ? absl::InternalError("--secure: cannot make a directory")
                      : downpour::MakeJobCredentials(*script, dir);
    if (s.ok()) std::cout << "launch: --secure: mutual TLS and a token, files in "
                          << dir << std::endl;
  }
  if (!s.ok()) {
    std::cerr << "launch: " << s.status().message() << "\n";
    return false;
  }
  o->security_args = downpour::SecurityArgsFor(*s);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a Downpour-SGD cluster on localhost: parameter servers, workers "
      "and a final evaluation.\n  launch --servers=2 --workers=2 --epochs=3");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "launch: unexpected argument '" << positional[1]
              << "' (all options are --flags)\n";
    return 2;
  }

  downpour::LaunchOptions o;
  if (!ReadFlags(&o) || !FindBinaries(argv[0], &o)) return 2;
  if (!ReadSecurityFlags(argv[0], &o)) return 2;  // Security and operations.

  absl::StatusOr<downpour::TrainMode> mode =
      downpour::ParseModeFlag(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) {
    std::cerr << "launch: " << mode.status().message() << "\n";
    return ExitCodeFor(mode.status());
  }
  o.mode = *mode;
  if (o.lr == 0) o.lr = downpour::DefaultLearningRate(o.optimizer);

  if (absl::Status s = downpour::ValidateLaunchOptions(o); !s.ok()) {
    std::cerr << "launch: " << s.message() << "\n";
    return ExitCodeFor(s);
  }
  if (o.lr_schedule == "auto") {  // Compute and learning (issue 18).
    absl::StatusOr<int64_t> examples =
        downpour::CountTrainingExamples(o.data_dir, o.max_train_examples);
    if (examples.ok()) {
      o.lr_rule_args = downpour::LrRuleArgs(o, *examples);
    } else {
      std::cerr << "launch: warning: no learning-rate schedule (cannot count "
                   "the training examples: "
                << examples.status().message() << ")\n";
    }
  }

  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed stdout (e.g. `launch | head`) must not kill the launcher before
  // it has stopped its children. Children get default dispositions back.
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<downpour::Summary> summary =
      downpour::RunCluster(o, std::cout, &g_stop_signal);
  if (!summary.ok()) {
    std::cout.flush();
    std::cout << "launch: " << summary.status().message() << std::endl;
    return ExitCodeFor(summary.status());
  }
  return 0;
}
