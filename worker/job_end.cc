#include "worker/job_end.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/run_summary.h"
#include "grpcpp/grpcpp.h"
#include "proto/job_control.grpc.pb.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"

namespace downpour {

struct JobEndClient::Stubs {
  std::vector<std::unique_ptr<proto::JobControl::Stub>> stubs;
};

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobEndClient>> JobEndClient::Create(
    const std::vector<std::string>& ps_hosts,
    const TransportSecurityOptions& security, absl::Duration rpc_timeout,
    const std::vector<std::string>& standby_hosts) {
  if (ps_hosts.empty()) return absl::InvalidArgumentError("no servers");
  if (!standby_hosts.empty() && standby_hosts.size() != ps_hosts.size()) {
    return absl::InvalidArgumentError("one standby per shard");
  }
  std::vector<std::string> all = ps_hosts;
  all.insert(all.end(), standby_hosts.begin(), standby_hosts.end());
  DP_ASSIGN_OR_RETURN(ClientSecurity client_security,
                      BuildClientSecurity(security));
  grpc::ChannelArguments args;
  ConfigureChannelArguments(&args);
  auto stubs = std::make_unique<Stubs>();
  for (const std::string& host : all) {
    DP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                        CreateChannel(host, client_security, args));
    stubs->stubs.push_back(proto::JobControl::NewStub(channel));
  }
  return std::unique_ptr<JobEndClient>(
      new JobEndClient(std::move(all), std::move(stubs), rpc_timeout,
                       static_cast<int>(ps_hosts.size())));
}

JobEndClient::JobEndClient(std::vector<std::string> hosts,
                           std::unique_ptr<Stubs> stubs,
                           absl::Duration rpc_timeout, int num_shards)
    : hosts_(std::move(hosts)), num_shards_(num_shards),
      stubs_(std::move(stubs)), rpc_timeout_(rpc_timeout) {}

absl::Status JobEndClient::CallEveryShard(
    const std::function<absl::Status(size_t)>& call) const {
  std::vector<absl::Status> results;
  for (size_t i = 0; i < hosts_.size(); ++i) results.push_back(call(i));
  const size_t n = static_cast<size_t>(num_shards_);
  for (size_t k = 0; k < n; ++k) {
    if (results[k].ok()) continue;
    if (hosts_.size() > n && results[n + k].ok()) continue;
    return results[k];
  }
  return absl::OkStatus();
}

JobEndClient::~JobEndClient() = default;

absl::Status JobEndClient::ReportWorkerDone(int worker_id,
                                            const absl::Status& result,
                                            const std::string& done_line) {
  proto::WorkerDoneRequest request;
  request.set_worker_id(worker_id);
  if (!result.ok()) request.set_error(result.ToString());
  request.set_done_line(done_line);
  // With standbys one process of a pair may be gone: no waiting for it.
  const bool wait = hosts_.size() == static_cast<size_t>(num_shards_);
  return CallEveryShard([&](size_t i) {
    grpc::ClientContext context;
    SetDeadline(&context, rpc_timeout_);
    context.set_wait_for_ready(wait);
    proto::WorkerDoneResponse response;
    return FromGrpcStatus(
        stubs_->stubs[i]->WorkerDone(&context, request, &response),
        absl::StrCat("WorkerDone to ", hosts_[i]));
  });
}

absl::StatusOr<JobReports> JobEndClient::WaitForWorkers(
    int chief_id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    grpc::ClientContext context;
    SetDeadline(&context, rpc_timeout_);
    context.set_wait_for_ready(hosts_.size() == static_cast<size_t>(num_shards_));
    proto::JobStateRequest request;
    proto::JobStateResponse response;
    absl::Status got = FromGrpcStatus(
        stubs_->stubs[0]->GetJobState(&context, request, &response),
        absl::StrCat("GetJobState from ", hosts_[0]));
    if (hosts_.size() > static_cast<size_t>(num_shards_)) {
      // Server 0's two processes: a restarted one missed the reports sent
      // before it came back, so the chief takes the union of both.
      const size_t standby = static_cast<size_t>(num_shards_);
      grpc::ClientContext again;
      SetDeadline(&again, rpc_timeout_);
      proto::JobStateResponse other;
      const absl::Status got_other = FromGrpcStatus(
          stubs_->stubs[standby]->GetJobState(&again, request, &other),
          absl::StrCat("GetJobState from ", hosts_[standby]));
      if (!got.ok()) {
        got = got_other;
        response = std::move(other);
      } else if (got_other.ok()) {
        std::set<int> have;
        for (const proto::WorkerState& w : response.done()) {
          have.insert(w.worker_id());
        }
        for (const proto::WorkerState& w : other.done()) {
          if (have.insert(w.worker_id()).second) *response.add_done() = w;
        }
        if (response.aborted().empty()) response.set_aborted(other.aborted());
      }
    }
    DP_RETURN_IF_ERROR(got);
    if (!response.aborted().empty()) {
      return absl::AbortedError(
          absl::StrCat("the servers aborted the job: ", response.aborted()));
    }
    std::set<int> reported;
    JobReports reports;
    reports.optimizer = response.optimizer();
    reports.lr = response.lr();
    for (const proto::WorkerState& w : response.done()) {
      if (w.worker_id() == chief_id) continue;
      reported.insert(w.worker_id());
      if (!w.error().empty()) {
        reports.errors.push_back(
            absl::StrCat("worker ", w.worker_id(), ": ", w.error()));
      } else if (std::optional<DoneReport> d = ParseDoneLine(w.done_line())) {
        reports.done.push_back(*d);
      }
    }
    std::vector<int> missing;
    for (int i = 0; i < response.num_workers(); ++i) {
      if (i != chief_id && reported.count(i) == 0) missing.push_back(i);
    }
    if (missing.empty()) return reports;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gave up after ", absl::FormatDuration(timeout),
          " waiting for workers ", absl::StrJoin(missing, ","),
          " to finish"));
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

absl::Status JobEndClient::EndJob(int worker_id, const std::string& error) {
  proto::EndJobRequest request;
  request.set_worker_id(worker_id);
  request.set_error(error);
  return CallEveryShard([&](size_t i) {
    grpc::ClientContext context;
    SetDeadline(&context, rpc_timeout_);
    proto::EndJobResponse response;
    return FromGrpcStatus(
        stubs_->stubs[i]->EndJob(&context, request, &response),
        absl::StrCat("EndJob to ", hosts_[i]));
  });
}

std::string ChiefSummaryJson(const ChiefRecord& record) {
  SummaryJob options;
  options.mode = record.mode;
  options.servers = record.servers;
  options.workers = record.workers;
  options.epochs = record.epochs;
  options.batch_size = record.batch_size;
  options.optimizer = record.others.optimizer;
  options.lr = record.others.lr;
  RunRecord run;
  run.done = record.others.done;
  run.done.push_back(record.chief_done);
  run.eval = record.eval;
  for (const ShardStats& s : record.stats) {
    if (absl::StatusOr<JsonNumbers> n = ParseJsonNumbers(ShardStatsToJson(s));
        n.ok()) {
      run.server_stats.push_back(*n);
    }
  }
  for (const DoneReport& d : run.done) {
    run.training_seconds = std::max(run.training_seconds, d.seconds);
  }
  run.curve.push_back({run.training_seconds, record.eval.test_accuracy});
  run.wall_seconds = record.wall_seconds;
  run.log_dir = record.log_dir;
  return Summarize(options, run).ToJson();
}

}  // namespace downpour
