#include "deploy/launch_flags.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/job_flags.h"
#include "common/process_setup.h"
#include "deploy/fs.h"
#include "deploy/launch_security.h"
#include "rpc/security_flags.h"
#include "server/lr_rules.h"
#include "server/optimizer.h"
#include "server/store_flags.h"
#include "worker/backend_flags.h"
#include "worker/input_flags.h"
#include "worker/training_flags.h"
#include "worker/transport_flags.h"
#include "common/sandblaster_flags.h"

ABSL_FLAG(int, servers, 2, "Number of parameter-server shards (>= 1).");
ABSL_FLAG(int, workers, 2, "Number of training worker processes (>= 1).");
ABSL_FLAG(int, gpus_per_worker, 0,
          "GPUs of --gpus each worker process takes: worker i gets entries "
          "i*K .. i*K+K-1 (modulo the list). 0: the list split evenly among "
          "--workers, one each when they outnumber it. Without --gpus on a "
          "host with 2 or more GPUs, the list is every GPU of the host.");
ABSL_FLAG(double, eval_every_s, 0,
          "Accuracy-vs-time curve: every N seconds of training, evaluate the "
          "servers' parameters on --eval_examples test examples (skipped "
          "while the previous one runs); 0 = off.");
ABSL_FLAG(int64_t, eval_examples, 5000,
          "Test examples of each --eval_every_s evaluation (>= 1).");
ABSL_FLAG(std::string, curve_csv, "",
          "If set, the accuracy-vs-time curve (the --eval_every_s points and "
          "the final evaluation) is written here as seconds,test_accuracy.");
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

// Supervise instead of tearing down.
ABSL_FLAG(int, max_restarts, 0,
          "Restart a server (same port, from its snapshot) or a worker (same "
          "index, from its data position) that died, up to N times per "
          "child; 0: a death ends the job. Servers snapshot to "
          "<log_dir>/ckpt/shard<k> every --checkpoint_every_s and when "
          "stopped.");
ABSL_FLAG(bool, standby, false,
          "Start a standby ps_server beside each shard (docs/operations.md, "
          "Standby shards): it applies every change before the primary "
          "acknowledges it and takes over when the primary dies. Servers "
          "then listen on loopback ports chosen up front. Not with "
          "--mode=sandblaster.");
ABSL_FLAG(bool, resume, false,
          "Continue the job whose snapshots and data positions are in "
          "--log_dir (after Ctrl-C or a crash), with the same job flags. "
          "Without it a --log_dir holding snapshots is refused (exit 2), "
          "naming what differs when they are another job's.");

// Security and observability (docs/operations.md). The TLS and token flags
// (rpc/security_flags.cc) are passed on to every child.
ABSL_FLAG(bool, secure, false,
          "Make a CA, certificates and a token for this job (deploy/"
          "make_certs.sh, into <log_dir>/certs or a fresh temporary "
          "directory) and use them: mutual TLS and a token on every call.");
ABSL_FLAG(int, metrics_base_port, -1,
          "Prometheus endpoints: server k on this port + k, worker i on this "
          "port + servers + i (deploy/prometheus.yml scrapes 9400-9403); -1 off.");

namespace downpour {

int CountHostGpus() {
  if (const char* visible = getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    // As CUDA reads it: the entries up to the first that names no device.
    int n = 0;
    for (absl::string_view e : absl::StrSplit(visible, ',')) {
      e = absl::StripAsciiWhitespace(e);
      if (e.empty() || e[0] == '-') break;
      ++n;
    }
    return n;
  }
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace downpour

namespace {

std::vector<std::string> SplitArgs(const std::string& s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
}


// Copies the flags into *o: the launcher's own and the shared ones
// (common/job_flags.h, server/store_flags.h, worker/training_flags.h,
// worker/input_flags.h, worker/backend_flags.h, worker/transport_flags.h),
// whose given values it passes on. False, after printing why, for a bad
// flag.
bool ReadFlags(downpour::LaunchOptions* o) {
  absl::StatusOr<downpour::JobFlags> job = downpour::JobFlagsFromFlags();
  absl::StatusOr<downpour::StoreFlags> store = downpour::StoreFlagsFromFlags();
  absl::StatusOr<downpour::TrainingFlags> training =
      downpour::TrainingFlagsFromFlags();
  absl::StatusOr<downpour::BackendFlags> backend =
      downpour::BackendFlagsFromFlags();
  absl::StatusOr<downpour::InputOptions> input =
      downpour::InputOptionsFromFlags();
  // The servers' optimizer and the workers' wire encodings, checked here
  // so that a bad value stops the job before any child starts.
  absl::Status optimizer = store.status();
  if (optimizer.ok()) {
    downpour::OptimizerOptions opt = store->store.optimizer;
    if (!(opt.learning_rate > 0)) {
      opt.learning_rate = downpour::DefaultLearningRate(opt.name);
    }
    optimizer = downpour::CreateOptimizer(opt).status();
    if (!optimizer.ok()) {
      optimizer = absl::InvalidArgumentError(absl::StrCat(
          "--optimizer=", opt.name, ": ", optimizer.message(),
          opt.name == "adamw" ? "; AdamW is --optimizer=adam --weight_decay=W"
                              : ""));
    }
  }
  downpour::GrpcClientOptions transport;
  for (const absl::Status& s :
       {job.status(), store.status(), optimizer, training.status(),
        backend.status(), input.status(),
        downpour::TransportOptionsFromFlags(&transport)}) {
    if (!s.ok()) {
      std::cerr << "launch: " << s.message() << "\n";
      return false;
    }
  }
  o->servers = absl::GetFlag(FLAGS_servers);
  o->workers = absl::GetFlag(FLAGS_workers);
  o->device = downpour::DeviceKindName(backend->device);
  o->gpus = downpour::GpusFlagValue(job->gpus);
  o->gpus_per_worker = absl::GetFlag(FLAGS_gpus_per_worker);
  o->host_gpus = downpour::CountHostGpus();
  o->replicas = job->replicas;
  o->local_aggregation = job->local_sum ? "sum" : "none";
  o->mode = job->mode;
  o->epochs = job->epochs;
  o->batch_size = job->batch_size;
  o->n_push = job->n_push;
  o->data_dir = job->data_dir;
  o->dataset = job->dataset;
  o->max_train_examples = job->max_train_examples;
  const downpour::ParameterStoreOptions& s = store->store;
  o->replicas_to_aggregate = s.replicas_to_aggregate;
  o->staleness = s.staleness;
  o->staleness_aware = s.staleness_aware;
  o->drop_stale_threshold = s.drop_stale_threshold;
  o->sync_timeout_s = absl::ToDoubleSeconds(s.sync_timeout);
  o->min_replicas = s.min_replicas;
  o->optimizer = s.optimizer.name;
  o->lr = s.optimizer.learning_rate > 0
              ? s.optimizer.learning_rate
              : downpour::DefaultLearningRate(o->optimizer);
  o->lr_schedule = store->lr_schedule_auto ? "auto" : "none";
  o->checkpoint_every = store->checkpoint_every;
  o->label_smoothing = training->label_smoothing;
  o->augment = downpour::AugmentPolicyName(training->augment);
  o->seed = static_cast<int64_t>(training->seed);
  o->n_fetch = training->n_fetch;
  o->save_params = training->save_params;
  o->summary_json = training->summary_json;
  o->forwarded_server_args = downpour::GivenStoreFlagArgs();
  for (const std::vector<std::string>& given :
       {downpour::GivenTrainingFlagArgs(), downpour::GivenInputFlagArgs(),
        downpour::GivenBackendFlagArgs(),
        downpour::GivenTransportFlagArgs(),
        downpour::GivenSandblasterFlagArgs()}) {
    o->forwarded_worker_args.insert(o->forwarded_worker_args.end(),
                                    given.begin(), given.end());
  }
  const double eval_every_s = absl::GetFlag(FLAGS_eval_every_s);
  if (!std::isfinite(eval_every_s) || eval_every_s < 0) {
    std::cerr << "launch: --eval_every_s must be a finite number >= 0 "
                 "(0 = off), got " << eval_every_s << "\n";
    return false;
  }
  o->eval_every = absl::Seconds(eval_every_s);
  o->eval_examples = absl::GetFlag(FLAGS_eval_examples);
  o->curve_csv = absl::GetFlag(FLAGS_curve_csv);
  o->server_args = SplitArgs(absl::GetFlag(FLAGS_server_args));
  o->worker_args = SplitArgs(absl::GetFlag(FLAGS_worker_args));
  o->log_dir = absl::GetFlag(FLAGS_log_dir);
  o->startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  o->max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o->resume = absl::GetFlag(FLAGS_resume);
  o->standby = absl::GetFlag(FLAGS_standby);
  return true;
}

// Fills in the binaries not given by flag. False, after printing what to do,
// when one cannot be found.
bool FindBinaries(const char* argv0, downpour::LaunchOptions* o) {
  const std::vector<std::string> exe_paths = {downpour::SelfExePath(), argv0};
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

// Security: the flags every child gets. False, after
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
        {downpour::SelfExePath(), argv0}, "deploy/make_certs.sh");
    std::string dir = o->log_dir + "/certs";
    if (o->log_dir.empty()) {
      const char* tmp = getenv("TMPDIR");
      std::string tmpl = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") +
                         "/downpour-certs-XXXXXX";
      dir = mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
    }
    s = !script.ok() ? script.status()
        : dir.empty() ? absl::InternalError("--secure: cannot make a directory")
                      : downpour::MakeJobCredentials(*script, dir, o->servers,
                                                     o->workers);
    if (s.ok()) {
      std::cout << "launch: --secure: mutual TLS and a token, files in "
                << dir << std::endl;
      // One certificate per task, unless a process holds several worker
      // ids (independent replicas).
      if (o->ServerWorkers() == o->workers) o->task_cert_dir = dir;
    }
  }
  if (!s.ok()) {
    std::cerr << "launch: " << s.status().message() << "\n";
    return false;
  }
  o->security_args = downpour::SecurityArgsFor(*s);
  return true;
}

}  // namespace

namespace downpour {

bool LaunchOptionsFromFlags(const char* argv0, LaunchOptions* o) {
  return ReadFlags(o) && FindBinaries(argv0, o) && ReadSecurityFlags(argv0, o);
}

}  // namespace downpour
