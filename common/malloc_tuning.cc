#include "common/malloc_tuning.h"

#include <malloc.h>

namespace downpour {

bool TuneMallocForLargeBuffers() {
  // 32 MiB is glibc's largest mmap threshold on 64-bit hosts.
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  return ok;
}

}  // namespace downpour
