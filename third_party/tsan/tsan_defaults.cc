// File: tsan_defaults.cc
//
// ThreadSanitizer builds only (--config=tsan): the options and suppressions
// every TSan binary of the project starts with, compiled in so that they hold
// inside Bazel's sandbox, in the child processes a test starts, and when a
// binary is run by hand. TSAN_OPTIONS in the environment still adds to or
// overrides them.
//
// The suppressions are for Debian's uninstrumented gRPC and protobuf only.
// TSan does not see their memory accesses, but it does see the libc calls they
// make (epoll, read/write on file descriptors, memcpy, free) and checks those
// against each other; their synchronization is partly lock-free atomics it
// cannot see, so such reports are false (the first one seen: gRPC's poller
// thread calling epoll_wait on the epoll fd its creator made, "race" between
// epoll_create1 and epoll_wait). `called_from_lib` makes TSan ignore the
// accesses of interceptors called from those libraries; it does not hide a race
// in our code. Abseil's locks are made visible instead of suppressed
// (absl_sync_annotations.cc). Each template must match exactly one loaded
// library, hence the trailing dot.

#if defined(__SANITIZE_THREAD__)

extern "C" const char* __tsan_default_options() {
  // halt_on_error: the first report fails the test, with its stack.
  return "halt_on_error=1:second_deadlock_stack=1:history_size=4";
}

extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libgrpc.so.\n"
         "called_from_lib:libgrpc++.so.\n"
         "called_from_lib:libgpr.so.\n"
         "called_from_lib:libprotobuf.so.\n";
}

#endif  // __SANITIZE_THREAD__
