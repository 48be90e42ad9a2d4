#include "server/byte_runs.h"

namespace downpour {

// Counting with integer compares (exponent bits all ones) lets the compiler
// vectorize the pass, unlike a float reduction, so validation runs at memory
// speed.
bool AllFinite(const char* p, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + 4 * i, sizeof u);
    bad += (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

bool AllFinite(const ChunkBytes& c) {
  bool finite = true;
  ForEachRun(c, [&](const char* p, int64_t n, int64_t) {
    finite = finite && AllFinite(p, n);
  });
  return finite;
}

void CopyValues(const ChunkBytes& c, float* dst) {
  ForEachRun(c, [&](const char* p, int64_t n, int64_t first) {
    std::memcpy(dst + first, p, static_cast<size_t>(n) * 4);
  });
}

int64_t PiecesBytes(const ChunkBytes& c) {
  if (c.pieces.empty()) return c.num_bytes;
  int64_t total = 0;
  for (absl::string_view piece : c.pieces) total += piece.size();
  return total;
}

}  // namespace downpour
