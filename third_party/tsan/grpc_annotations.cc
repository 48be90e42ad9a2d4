// File: grpc_annotations.cc
//
// ThreadSanitizer builds only (--config=tsan): tells TSan about the
// happens-before edge of a gRPC batch, from the thread that starts it to the
// thread that receives its completion.
//
// gRPC's C++ API is inline header code, compiled (and instrumented) into our
// binaries, while gRPC core is Debian's uninstrumented libgrpc.so. A call's
// state (the CallOpSet, the CallbackWithStatusTag and its std::function) is
// written by the thread that starts the call and read by the thread that runs
// its completion; in between the tag travels through core's lock-free
// completion queue, which TSan cannot see, so it reported those reads as
// races (tests/transport_test, several pulls in flight at once). Here the
// executable interposes the C functions that hand a tag to core and give it
// back (libgrpc++ calls them through the PLT): release on the tag when a batch
// or a server request is handed over, acquire on it when the completion queue
// returns it.
//
// Linked into every binary that links @system//:grpc, only under
// --config=tsan; compiles to nothing without -fsanitize=thread.

#if defined(__SANITIZE_THREAD__)

#include <dlfcn.h>
#include <grpc/grpc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

// libgrpc's definition of `name`; aborts when missing (a TSan build against
// another gRPC must fail loudly, not pass without the edges).
template <typename Fn>
Fn Real(std::atomic<void*>& slot, const char* name) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, name);
    if (fn == nullptr) {
      std::fprintf(stderr, "tsan grpc annotations: %s not found (%s)\n", name,
                   dlerror());
      std::abort();
    }
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

#define DOWNPOUR_REAL(fn)                       \
  static std::atomic<void*> real_slot{nullptr}; \
  const auto real = Real<decltype(&fn)>(real_slot, #fn)

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops,
                                      size_t nops, void* tag, void* reserved) {
  DOWNPOUR_REAL(grpc_call_start_batch);
  if (tag != nullptr) __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}

grpc_call_error grpc_server_request_call(
    grpc_server* server, grpc_call** call, grpc_call_details* details,
    grpc_metadata_array* request_metadata,
    grpc_completion_queue* cq_bound_to_call,
    grpc_completion_queue* cq_for_notification, void* tag_new) {
  DOWNPOUR_REAL(grpc_server_request_call);
  if (tag_new != nullptr) __tsan_release(tag_new);
  return real(server, call, details, request_metadata, cq_bound_to_call,
              cq_for_notification, tag_new);
}

grpc_call_error grpc_server_request_registered_call(
    grpc_server* server, void* registered_method, grpc_call** call,
    gpr_timespec* deadline, grpc_metadata_array* request_metadata,
    grpc_byte_buffer** optional_payload,
    grpc_completion_queue* cq_bound_to_call,
    grpc_completion_queue* cq_for_notification, void* tag_new) {
  DOWNPOUR_REAL(grpc_server_request_registered_call);
  if (tag_new != nullptr) __tsan_release(tag_new);
  return real(server, registered_method, call, deadline, request_metadata,
              optional_payload, cq_bound_to_call, cq_for_notification,
              tag_new);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq,
                                      gpr_timespec deadline, void* reserved) {
  DOWNPOUR_REAL(grpc_completion_queue_next);
  const grpc_event ev = real(cq, deadline, reserved);
  if (ev.type == GRPC_OP_COMPLETE && ev.tag != nullptr) __tsan_acquire(ev.tag);
  return ev;
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag,
                                       gpr_timespec deadline, void* reserved) {
  DOWNPOUR_REAL(grpc_completion_queue_pluck);
  const grpc_event ev = real(cq, tag, deadline, reserved);
  if (ev.type == GRPC_OP_COMPLETE && ev.tag != nullptr) __tsan_acquire(ev.tag);
  return ev;
}

}  // extern "C"

#endif  // __SANITIZE_THREAD__
