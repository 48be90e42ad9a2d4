// File: common/heap_trimmer.h
//
// Gives free heap memory back to the system once the process has been idle
// for a while. common/malloc_tuning.h keeps freed memory mapped (a 1 GiB trim
// threshold, one arena) so that steady traffic reuses warm pages; the price
// was that memory taken by a burst stayed resident for good: a refused 200 MB
// message left a ps_server ~200 MiB larger, four at once ~370 MiB,
// held by glibc as free but fragmented heap, all of it returned by
// malloc_trim(0). The trimmer calls malloc_trim(0) from a thread of its own
// every period once the caller's activity count has not moved for
// `idle_periods` periods, while the heap's free bytes are at least
// `min_free_bytes`, so a busy job keeps its warm pages and an idle server
// shrinks back within seconds.
//
//   HeapTrimmerOptions o;
//   o.activity = [store] { return store->Stats().pushes_applied; };
//   HeapTrimmer trimmer(o);   // stops (joins its thread) when destroyed
//
// Process-wide in effect (malloc_trim), so only `main` functions make one.
// Thread-safety: the constructor and destructor from one thread; trims()
// from any.
#ifndef DOWNPOUR_COMMON_HEAP_TRIMMER_H_
#define DOWNPOUR_COMMON_HEAP_TRIMMER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace downpour {

struct HeapTrimmerOptions {
  // How often the heap and the activity count are looked at.
  absl::Duration period = absl::Seconds(1);
  // Periods without activity before a trim.
  int idle_periods = 2;
  // Free heap bytes (mallinfo2's fordblks) below which nothing is done;
  // 0 disables the trimmer.
  int64_t min_free_bytes = int64_t{64} << 20;
  // A count that grows with the work the process does (e.g. the store's
  // pulls and pushes); called from the trimmer's thread. Null: always idle.
  std::function<int64_t()> activity;
};

class HeapTrimmer {
 public:
  explicit HeapTrimmer(HeapTrimmerOptions options);
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // malloc_trim calls made so far.
  int64_t trims() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const HeapTrimmerOptions options_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_HEAP_TRIMMER_H_
