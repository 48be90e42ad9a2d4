// File: tsan_defaults.cc
//
// ThreadSanitizer builds only (--config=tsan): the options and suppressions
// every TSan binary of the project starts with, compiled in so that they hold
// inside Bazel's sandbox, in the child processes a test starts, and when a
// binary is run by hand. TSAN_OPTIONS in the environment still adds to or
// overrides them.
//
// The suppressions are for Debian's uninstrumented libraries: gRPC and what
// it links, protobuf, and abseil. TSan does not see their memory accesses, but
// it does see the libc calls they make (epoll, file descriptors, memcpy,
// memmove, free) and checks those against each other; their synchronization
// is partly lock-free atomics it cannot see, so such reports are false (seen:
// gRPC's poller calling epoll_wait on the epoll fd its creator made; memmove
// in abseil's deadlock-detection graph, guarded by an internal spinlock; an
// absl::Status payload freed after gRPC copied it on another thread).
// `called_from_lib` makes TSan ignore the accesses of the libc calls made from
// those libraries; it hides no access made by our own code, whose races are
// still reported. Abseil's locks are made visible instead of suppressed
// (absl_sync_annotations.cc). Each template must match exactly one library
// (TSan dies otherwise), hence "/name.so.". The abseil list is the one
// @system//:absl links (third_party/system/system.BUILD); a library missing
// here only means its libc calls are checked.

#if defined(__SANITIZE_THREAD__)

extern "C" const char* __tsan_default_options() {
  // halt_on_error: the first report fails the test, with its stack.
  return "halt_on_error=1:second_deadlock_stack=1:history_size=4";
}

// One suppression per library, as one string literal: TSan asks for it while
// it initializes, before allocation is safe.
#define DOWNPOUR_LIB(name) "called_from_lib:/lib" #name ".so.\n"
#define DOWNPOUR_ABSL(name) DOWNPOUR_LIB(absl_##name)

extern "C" const char* __tsan_default_suppressions() {
  return
    // gRPC's inline C++ API copying the status message out of a slice that
    // core owns: core had taken the server's std::string into a slice and
    // freed it from libgrpc (an access TSan is told to ignore, so the block's
    // old owner is not forgotten), and the client's slice reused the block.
    // Seen once in worker/grpc_ps_client_test (a status from another thread's
    // server std::string); the read is gRPC's, of gRPC's memory.
    "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n"
    DOWNPOUR_LIB(grpc) DOWNPOUR_LIB(grpc++) DOWNPOUR_LIB(gpr) DOWNPOUR_LIB(upb)
    DOWNPOUR_LIB(address_sorting) DOWNPOUR_LIB(re2) DOWNPOUR_LIB(cares)
    DOWNPOUR_LIB(ssl) DOWNPOUR_LIB(crypto) DOWNPOUR_LIB(z)
    DOWNPOUR_LIB(protobuf)
    DOWNPOUR_ABSL(flags_parse) DOWNPOUR_ABSL(flags_usage)
    DOWNPOUR_ABSL(flags_usage_internal) DOWNPOUR_ABSL(flags_internal)
    DOWNPOUR_ABSL(flags_marshalling) DOWNPOUR_ABSL(flags_reflection)
    DOWNPOUR_ABSL(flags_private_handle_accessor)
    DOWNPOUR_ABSL(flags_commandlineflag)
    DOWNPOUR_ABSL(flags_commandlineflag_internal) DOWNPOUR_ABSL(flags_config)
    DOWNPOUR_ABSL(flags_program_name) DOWNPOUR_ABSL(statusor)
    DOWNPOUR_ABSL(status) DOWNPOUR_ABSL(cord) DOWNPOUR_ABSL(cordz_info)
    DOWNPOUR_ABSL(cord_internal) DOWNPOUR_ABSL(cordz_functions)
    DOWNPOUR_ABSL(cordz_handle) DOWNPOUR_ABSL(exponential_biased)
    DOWNPOUR_ABSL(strerror) DOWNPOUR_ABSL(str_format_internal)
    DOWNPOUR_ABSL(synchronization) DOWNPOUR_ABSL(graphcycles_internal)
    DOWNPOUR_ABSL(stacktrace) DOWNPOUR_ABSL(symbolize)
    DOWNPOUR_ABSL(debugging_internal) DOWNPOUR_ABSL(demangle_internal)
    DOWNPOUR_ABSL(malloc_internal) DOWNPOUR_ABSL(time)
    DOWNPOUR_ABSL(civil_time) DOWNPOUR_ABSL(time_zone) DOWNPOUR_ABSL(strings)
    DOWNPOUR_ABSL(strings_internal) DOWNPOUR_ABSL(raw_hash_set)
    DOWNPOUR_ABSL(hashtablez_sampler) DOWNPOUR_ABSL(hash) DOWNPOUR_ABSL(city)
    DOWNPOUR_ABSL(low_level_hash) DOWNPOUR_ABSL(random_distributions)
    DOWNPOUR_ABSL(random_seed_sequences)
    DOWNPOUR_ABSL(random_internal_pool_urbg)
    DOWNPOUR_ABSL(random_internal_randen)
    DOWNPOUR_ABSL(random_internal_randen_hwaes)
    DOWNPOUR_ABSL(random_internal_randen_hwaes_impl)
    DOWNPOUR_ABSL(random_internal_randen_slow)
    DOWNPOUR_ABSL(random_internal_platform)
    DOWNPOUR_ABSL(random_internal_seed_material)
    DOWNPOUR_ABSL(random_seed_gen_exception) DOWNPOUR_ABSL(bad_optional_access)
    DOWNPOUR_ABSL(bad_variant_access) DOWNPOUR_ABSL(base)
    DOWNPOUR_ABSL(spinlock_wait) DOWNPOUR_ABSL(int128)
    DOWNPOUR_ABSL(throw_delegate) DOWNPOUR_ABSL(raw_logging_internal)
    DOWNPOUR_ABSL(log_severity);
}

#endif  // __SANITIZE_THREAD__
