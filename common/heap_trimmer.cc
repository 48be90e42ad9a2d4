#include "common/heap_trimmer.h"

#include <malloc.h>

#include <utility>

namespace downpour {

HeapTrimmer::HeapTrimmer(HeapTrimmerOptions options)
    : options_(std::move(options)) {
  if (options_.min_free_bytes > 0) thread_ = std::thread([this] { Loop(); });
}

HeapTrimmer::~HeapTrimmer() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t HeapTrimmer::trims() const {
  absl::MutexLock l(&mu_);
  return trims_;
}

void HeapTrimmer::Loop() {
  int64_t last = options_.activity ? options_.activity() : 0;
  int idle = 0;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      const bool stop = mu_.AwaitWithTimeout(absl::Condition(&stop_),
                                             options_.period);
      if (stop) return;
    }
    const int64_t now = options_.activity ? options_.activity() : 0;
    idle = now == last ? idle + 1 : 0;
    last = now;
    if (idle < options_.idle_periods) continue;
    // While idle, every period: the free-byte count still includes pages an
    // earlier trim gave back, so it cannot tell whether a burst (refused
    // messages are no activity) took them again. mallinfo2 and malloc_trim
    // walk the free lists under the arena lock; pages already given back
    // cost little more than the walk.
    const struct mallinfo2 info = mallinfo2();
    if (static_cast<int64_t>(info.fordblks) < options_.min_free_bytes) continue;
    malloc_trim(0);
    absl::MutexLock l(&mu_);
    ++trims_;
  }
}

}  // namespace downpour
