// File: worker/job_thread.h
//
// A thread that runs one job at a time: Start() hands a job over, Wait()
// blocks until it finished and returns its status. The trainer uses one for
// the background push/pull (overlap) and one per replica beyond the first.
//
// Usage:
//   JobThread helper;
//   helper.Start([&] { return ComputeSomething(); });
//   ...                                    // other work meanwhile
//   DP_RETURN_IF_ERROR(helper.Wait());
//
// Thread-safety: Start, Wait, Finished and WaitFinished are called from one
// owning thread; the job runs on the internal thread. The destructor waits
// for a running job and joins the thread. Whatever a job refers to must
// outlive its Wait().
#ifndef DOWNPOUR_WORKER_JOB_THREAD_H_
#define DOWNPOUR_WORKER_JOB_THREAD_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

class JobThread {
 public:
  JobThread();
  ~JobThread();
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  // Precondition: idle (no job started since the last Wait).
  void Start(std::function<absl::Status()> job);
  // The started job's status once it finished; OK at once when none was
  // started.
  absl::Status Wait();
  // True when a started job has finished (Wait will not block).
  bool Finished();
  // Finished(), waiting up to `timeout` for the started job to finish.
  bool WaitFinished(absl::Duration timeout);

 private:
  void Loop();

  absl::Mutex mu_;
  std::function<absl::Status()> job_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: starts once the state above is built.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_JOB_THREAD_H_
