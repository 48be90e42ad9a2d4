// File: server/byte_runs.h
//
// Walking the float32 values of a ChunkBytes (server/store_types.h) that may
// arrive cut into pieces at any byte offset, without gathering them first:
// ForEachRun hands out runs of whole values, CopyValues and AllFinite are
// built on it. These sit on the push path, so they allocate nothing.
//
//   ForEachRun(grad, [&](const char* p, int64_t n, int64_t first) {
//     optimizer.Apply(n, p, scale, params + first, state + first * k);
//   });
//
// Thread-safety: pure functions over caller-owned bytes.
#ifndef DOWNPOUR_SERVER_BYTE_RUNS_H_
#define DOWNPOUR_SERVER_BYTE_RUNS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"
#include "server/store_types.h"

namespace downpour {

// Calls fn(bytes, count, first) for consecutive runs of whole float32 values
// of `c`, in order: `count` values at `bytes` (any alignment), the first of
// which is value number `first` of the chunk. A value straddling two pieces
// is assembled and passed as a run of one. `c.num_bytes` must be a multiple
// of 4 and equal to the pieces' total.
template <typename Fn>
void ForEachRun(const ChunkBytes& c, Fn&& fn) {
  if (c.pieces.empty()) {
    if (c.num_bytes >= 4) {
      fn(static_cast<const char*>(c.data), c.num_bytes / 4, int64_t{0});
    }
    return;
  }
  int64_t done = 0;  // Values passed so far.
  char partial[4];
  int have = 0;      // Bytes of a straddling value gathered in `partial`.
  for (absl::string_view piece : c.pieces) {
    if (piece.empty()) continue;
    const char* p = piece.data();
    int64_t left = static_cast<int64_t>(piece.size());
    if (have > 0) {
      const int take = static_cast<int>(std::min<int64_t>(4 - have, left));
      std::memcpy(partial + have, p, take);
      have += take;
      p += take;
      left -= take;
      if (have < 4) continue;
      fn(static_cast<const char*>(partial), int64_t{1}, done);
      ++done;
      have = 0;
    }
    const int64_t whole = left / 4;
    if (whole > 0) fn(p, whole, done);
    done += whole;
    have = static_cast<int>(left - whole * 4);
    std::memcpy(partial, p + whole * 4, have);
  }
}

// True when none of the n float32 values at p (any alignment) is Inf or NaN.
bool AllFinite(const char* p, int64_t n);

// True when no value of `c` is Inf or NaN.
bool AllFinite(const ChunkBytes& c);

// Copies the values of `c` to dst[0 .. c.num_bytes / 4).
void CopyValues(const ChunkBytes& c, float* dst);

// The bytes `c` actually carries: num_bytes, or the pieces' total.
int64_t PiecesBytes(const ChunkBytes& c);

}  // namespace downpour

#endif  // DOWNPOUR_SERVER_BYTE_RUNS_H_
