#include "rpc/shared_calls.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace downpour {

bool MoveSlot(std::atomic<uint32_t>* w, SlotState from, SlotState to) {
  uint32_t expected = static_cast<uint32_t>(from);
  return w->compare_exchange_strong(expected, static_cast<uint32_t>(to),
                                    std::memory_order_acq_rel,
                                    std::memory_order_acquire);
}

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen,
               absl::Duration timeout) {
  const struct timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts,
          nullptr, 0);
}

void Ring(std::atomic<uint32_t>* bell) {
  bell->fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(bell);
}

bool ProcessAlive(uint32_t pid) {
  if (pid == 0) return false;
  // kill(pid, 0) would count a zombie (killed, not yet reaped) as alive.
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  return close != nullptr && close[1] == ' ' && close[2] != 'Z' &&
         close[2] != 'X' && close[2] != '\0';
}

}  // namespace downpour
