// File: server/service_answer.h
//
// Where a parameter-server request's answer goes, so that the service's
// handlers (server/grpc_service.cc) serve gRPC calls and calls through a
// worker's shared region (server/shared_call_server.h) with one body: the
// reply bytes into `response`, then `finish` with the status, once, from
// any thread (a sync pull finishes on the thread that completes its step).
//
//   Answer a = GrpcAnswer(ctx, response, ctx->DefaultReactor());
//   ... fill *a.response ...; a.finish(status);
//
// Thread-safety: an Answer is moved to whichever thread finishes it.
#ifndef DOWNPOUR_SERVER_SERVICE_ANSWER_H_
#define DOWNPOUR_SERVER_SERVICE_ANSWER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/service_observer.h"
#include "server/shared_call_server.h"

namespace downpour {

struct Answer {
  grpc::ByteBuffer* response = nullptr;  // Filled before finish(OK).
  std::function<void(const absl::Status&)> finish;
  // Whether the caller gave up (a pull then writes no values into shared
  // memory).
  std::function<bool()> cancelled;
};

// Where shared calls are reported: the service's observer until the
// service stops its shared calls (an answer may be finished after that,
// from the store's shutdown).
class SharedCallReporter {
 public:
  explicit SharedCallReporter(ServiceObserver* observer) : observer_(observer) {}
  void Report(const char* method, absl::StatusCode code, absl::Duration latency,
              int64_t received_bytes, int64_t sent_bytes);
  void Clear();

 private:
  absl::Mutex mu_;
  ServiceObserver* observer_ ABSL_GUARDED_BY(mu_);  // Not owned; may be null.
};

// A gRPC call's answer: the reactor finishes it.
Answer GrpcAnswer(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
                  grpc::ServerUnaryReactor* reactor);

// A shared call's answer: the reply's bytes are copied into its slot, and
// the call is reported to `reporter` as `method` with `received` request
// bytes.
Answer SlotAnswer(SharedCallAnswer call,
                  std::shared_ptr<SharedCallReporter> reporter,
                  const char* method, int64_t received);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_SERVICE_ANSWER_H_
