#include "server/service_answer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "rpc/grpc_config.h"
#include "rpc/rpc_convert.h"

namespace downpour {

Answer GrpcAnswer(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
                  grpc::ServerUnaryReactor* reactor) {
  return Answer{response,
                [reactor](const absl::Status& s) {
                  reactor->Finish(ToGrpcStatus(s));
                },
                [ctx] { return ctx->IsCancelled(); }};
}

void SharedCallReporter::Report(const char* method, absl::StatusCode code,
                                absl::Duration latency, int64_t received_bytes,
                                int64_t sent_bytes) {
  absl::MutexLock l(&mu_);
  if (observer_ != nullptr) {
    observer_->OnSharedCall(method, code, latency, received_bytes, sent_bytes);
  }
}

void SharedCallReporter::Clear() {
  absl::MutexLock l(&mu_);
  observer_ = nullptr;
}

Answer SlotAnswer(SharedCallAnswer call,
                  std::shared_ptr<SharedCallReporter> reporter,
                  const char* method, int64_t received) {
  auto response = std::make_shared<grpc::ByteBuffer>();
  return Answer{response.get(),
                [response, call, reporter, method, received,
                 start = absl::Now()](const absl::Status& s) {
                  std::string bytes;
                  if (s.ok()) ByteBufferBytes(*response, &bytes);
                  // Counted before the worker can see the reply, as a
                  // gRPC call is: a scrape after the call counts it.
                  reporter->Report(method, s.code(), absl::Now() - start,
                                   received, static_cast<int64_t>(bytes.size()));
                  call.finish(s, bytes);
                },
                call.abandoned};
}

}  // namespace downpour
