// A floor under the stack size that libraries ask
// pthread_attr_setstacksize for, because Debian's civetweb (inside
// prometheus-cpp's /metrics endpoint, common/metrics_endpoint.h) starts its
// threads with a fixed 100 KiB stack, and glibc 2.36 carves each thread's
// static TLS out of that stack: OpenBLAS's 60 KiB of TLS in ps_worker left
// civetweb ~40 KiB and its worker thread overflowed on a scrape (SIGSEGV).
// This definition in the executable interposes on libc's (the BUILD target
// exports the symbol) and raises any request below kFloor to kFloor; larger
// requests are unchanged.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {

constexpr size_t kFloor = 1 << 20;  // 1 MiB (glibc's default is 8 MiB).

using SetStackSize = int (*)(pthread_attr_t*, size_t);

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  static const SetStackSize real = reinterpret_cast<SetStackSize>(
      dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attr, size < kFloor ? kFloor : size);
}
