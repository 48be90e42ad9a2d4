#include "worker/job_thread.h"

#include <utility>

namespace downpour {

JobThread::JobThread() : thread_([this] { Loop(); }) {}

JobThread::~JobThread() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void JobThread::Start(std::function<absl::Status()> job) {
  absl::MutexLock l(&mu_);
  job_ = std::move(job);
  busy_ = true;
  done_ = false;
}

absl::Status JobThread::Wait() {
  absl::MutexLock l(&mu_);
  if (!busy_) return absl::OkStatus();
  mu_.Await(absl::Condition(&done_));
  busy_ = false;
  return status_;
}

bool JobThread::Finished() {
  absl::MutexLock l(&mu_);
  return busy_ && done_;
}

bool JobThread::WaitFinished(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  if (!busy_) return false;
  mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  return done_;
}

void JobThread::Loop() {
  while (true) {
    std::function<absl::Status()> job;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (job_ != nullptr);
      };
      mu_.Await(absl::Condition(&ready));
      if (job_ == nullptr) return;
      job = std::move(job_);
      job_ = nullptr;
    }
    absl::Status s = job();
    absl::MutexLock l(&mu_);
    status_ = std::move(s);
    done_ = true;
  }
}

}  // namespace downpour
