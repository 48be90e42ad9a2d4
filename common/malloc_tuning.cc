#include "common/malloc_tuning.h"

#include <malloc.h>

namespace downpour {

bool TuneMallocForLargeBuffers() {
  // 32 MiB is glibc's largest mmap threshold on 64-bit hosts.
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  // One arena. glibc gives other threads arenas made of 64 MiB heaps, and
  // (in 2.36, Debian 12's) unmaps such a heap as soon as it is empty, trim
  // threshold or not. gRPC threads allocate a big message's receive slices,
  // so every 64 MB pull or push grew a heap, emptied it, unmapped it and
  // page-faulted it in again: ~1000 faults a round in the transport
  // benchmark. The main arena honours the trim threshold above; small
  // allocations still come from per-thread caches without its lock.
  ok = mallopt(M_ARENA_MAX, 1) == 1 && ok;
  return ok;
}

}  // namespace downpour
