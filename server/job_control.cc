#include "server/job_control.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/job_control.grpc.pb.h"
#include "rpc/auth_token.h"
#include "rpc/peer_identity.h"
#include "rpc/rpc_convert.h"

namespace downpour {
namespace {

class JobControlService final : public proto::JobControl::CallbackService {
 public:
  JobControlService(JobState* state, std::function<std::string()> aborted,
                    const TokenAuthenticator* auth, bool require_task_certificates)
      : state_(state), aborted_(std::move(aborted)), auth_(auth),
        strict_(require_task_certificates) {}

  grpc::ServerUnaryReactor* WorkerDone(
      grpc::CallbackServerContext* context,
      const proto::WorkerDoneRequest* request,
      proto::WorkerDoneResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
    if (absl::Status s = CheckActsForWorker(PeerIdentityOf(*context),
                                            request->worker_id(), strict_);
        !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    reactor->Finish(ToGrpcStatus(state_->WorkerDone(
        {request->worker_id(), request->error(), request->done_line()})));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJobState(
      grpc::CallbackServerContext* context,
      const proto::JobStateRequest* /*request*/,
      proto::JobStateResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
    response->set_num_workers(state_->num_workers());
    for (const WorkerReport& r : state_->Reports()) {
      proto::WorkerState* w = response->add_done();
      w->set_worker_id(r.worker_id);
      w->set_error(r.error);
      w->set_done_line(r.done_line);
    }
    response->set_optimizer(state_->optimizer());
    response->set_lr(state_->lr());
    response->set_aborted(aborted_());
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* EndJob(grpc::CallbackServerContext* context,
                                   const proto::EndJobRequest* request,
                                   proto::EndJobResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (RefuseUnauthenticated(auth_, *context, reactor)) return reactor;
    // Only the chief (worker 0) ends the job.
    const PeerIdentity peer = PeerIdentityOf(*context);
    absl::Status s = CheckActsForWorker(peer, 0, strict_);
    if (s.ok()) s = CheckActsForWorker(peer, request->worker_id(), strict_);
    if (!s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    reactor->Finish(ToGrpcStatus(
        state_->EndJob(request->worker_id(), request->error())));
    return reactor;
  }

 private:
  JobState* const state_;  // Not owned.
  const std::function<std::string()> aborted_;
  // The job's bearer token, checked before anything is read (the host's
  // authenticator, so refusals are counted together). Not owned; null: none.
  const TokenAuthenticator* const auth_;
  const bool strict_;  // require_task_certificates
};

}  // namespace

JobState::JobState(int num_workers, std::string optimizer, double lr)
    : num_workers_(num_workers), optimizer_(std::move(optimizer)), lr_(lr) {}

absl::Status JobState::WorkerDone(WorkerReport report) {
  if (report.worker_id < 0 || report.worker_id >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WorkerDone: worker ", report.worker_id, " is not in [0, ",
        num_workers_, ")"));
  }
  absl::MutexLock l(&mu_);
  bool replaced = false;
  for (WorkerReport& r : reports_) {
    if (r.worker_id == report.worker_id) {
      r = report;
      replaced = true;
    }
  }
  if (!replaced) reports_.push_back(std::move(report));
  if (end_.has_value() || static_cast<int>(reports_.size()) < num_workers_) {
    return absl::OkStatus();
  }
  JobEnd end{0, absl::StrCat("every one of the ", num_workers_,
                             " workers has left")};
  for (const WorkerReport& r : reports_) {
    if (!r.error.empty()) {
      end = {1, absl::StrCat("worker ", r.worker_id, " failed: ", r.error)};
      break;
    }
  }
  end_ = end;
  return absl::OkStatus();
}

absl::Status JobState::EndJob(int worker_id, const std::string& error) {
  if (worker_id < 0 || worker_id >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EndJob: worker ", worker_id, " is not in [0, ", num_workers_, ")"));
  }
  absl::MutexLock l(&mu_);
  if (end_.has_value()) return absl::OkStatus();
  if (error.empty()) {
    end_ = JobEnd{0, absl::StrCat("worker ", worker_id, " ended the job")};
  } else {
    end_ = JobEnd{1, absl::StrCat("worker ", worker_id,
                                  " ended the job as failed: ", error)};
  }
  return absl::OkStatus();
}

std::vector<WorkerReport> JobState::Reports() const {
  absl::MutexLock l(&mu_);
  return reports_;
}

std::optional<JobEnd> JobState::WaitForEnd(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &JobState::HasEnd), timeout);
  return end_;
}

std::unique_ptr<grpc::Service> NewJobControlService(
    JobState* state, std::function<std::string()> aborted,
    const TokenAuthenticator* auth, bool require_task_certificates) {
  return std::make_unique<JobControlService>(state, std::move(aborted), auth,
                                             require_task_certificates);
}

absl::Status ApplyClusterSpec(const ClusterSpec& spec, const std::string& bind,
                              ParameterServerHostOptions* options) {
  if (spec.task_type != TaskType::kPs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster spec (", spec.source, ") makes this task worker ",
        spec.task_index, "; run ps_worker, or deploy/node, for it"));
  }
  absl::StatusOr<HostPort> self =
      ParseHostPort(spec.SelfAddress(), "this task's entry");
  if (!self.ok()) return self.status();
  options->store.shard_index = spec.task_index;
  options->store.num_shards = static_cast<int>(spec.ps.size());
  if (options->store.num_workers == 0) {
    options->store.num_workers = static_cast<int>(spec.workers.size());
  }
  options->listen_addresses = {
      absl::StrCat(bind.empty() ? self->host : bind, ":", self->port)};
  return absl::OkStatus();
}

JobEnd WaitForJobEnd(JobState* state, const ParameterStore& store,
                     const absl::Notification* stop) {
  while (true) {
    if (std::optional<JobEnd> end = state->WaitForEnd(absl::Seconds(1))) {
      return *end;
    }
    if (stop->HasBeenNotified()) return {0, "stopped by a signal"};
    const std::string aborted = store.Stats().aborted;
    if (!aborted.empty()) return {1, absl::StrCat("job aborted: ", aborted)};
  }
}

}  // namespace downpour
