#include "common/incarnation.h"

#include <random>

#include "absl/time/clock.h"

namespace downpour {

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) {
    v = (uint64_t{rd()} << 32) ^ rd() ^
        static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  }
  return v;
}

}  // namespace downpour
