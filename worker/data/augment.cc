#include "worker/data/augment.h"

#include <cstring>

namespace downpour {
namespace data_internal {
namespace {

// Separates the augmentation draws from the shuffle's seed derivation.
constexpr uint64_t kAugmentSalt = 0x6175676d656e7421ULL;  // "augment!"

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t UniformBelow(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound.
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

uint64_t AugmentKey(uint64_t seed, int worker_index, int epoch,
                    size_t position) {
  return SplitMix64(
      SplitMix64(SplitMix64(SplitMix64(seed ^ kAugmentSalt) ^
                            static_cast<uint64_t>(worker_index)) ^
                 static_cast<uint64_t>(epoch)) ^
      static_cast<uint64_t>(position));
}

void ExampleTransform::Apply(const float* src, float* dst,
                             uint64_t key) const {
  const int h = height, w = width;
  const int pad = augment.random_crop_padding;
  int shift_y = 0, shift_x = 0;  // Crop offset minus the padding.
  if (pad > 0) {
    const uint64_t span = 2 * static_cast<uint64_t>(pad) + 1;
    // Modulo bias is below span / 2^64: irrelevant, and platform-independent.
    shift_y = static_cast<int>(SplitMix64(key ^ 1) % span) - pad;
    shift_x = static_cast<int>(SplitMix64(key ^ 2) % span) - pad;
  }
  const bool flip = augment.horizontal_flip && (SplitMix64(key ^ 3) >> 63) != 0;
  const bool normalize = !normalize_mean.empty();
  for (int c = 0; c < channels; ++c) {
    const float* plane = src + static_cast<size_t>(c) * h * w;
    float* out = dst + static_cast<size_t>(c) * h * w;
    const float mean = normalize ? normalize_mean[c] : 0.f;
    const float stddev = normalize ? normalize_std[c] : 1.f;
    for (int y = 0; y < h; ++y) {
      const int sy = y + shift_y;
      float* row = out + static_cast<size_t>(y) * w;
      const float* src_row =
          (sy >= 0 && sy < h) ? plane + static_cast<size_t>(sy) * w : nullptr;
      if (src_row != nullptr && shift_x == 0) {
        // The common case (no crop): no bounds to check per pixel.
        if (normalize) {
          for (int x = 0; x < w; ++x) {
            row[x] = (src_row[flip ? w - 1 - x : x] - mean) / stddev;
          }
        } else if (flip) {
          for (int x = 0; x < w; ++x) row[x] = src_row[w - 1 - x];
        } else {
          std::memcpy(row, src_row, static_cast<size_t>(w) * sizeof(float));
        }
        continue;
      }
      for (int x = 0; x < w; ++x) {
        const int sx = (flip ? w - 1 - x : x) + shift_x;
        const float v =
            (src_row != nullptr && sx >= 0 && sx < w) ? src_row[sx] : 0.f;
        row[x] = normalize ? (v - mean) / stddev : v;
      }
    }
  }
}

}  // namespace data_internal
}  // namespace downpour
