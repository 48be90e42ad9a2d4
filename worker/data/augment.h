// File: worker/data/augment.h
//
// The per-example stages of the input pipeline: the deterministic random
// draws (seeded per example, never from a shared generator, so results do not
// depend on thread count or timing) and the transform that crops, flips and
// normalizes one example.
//
// Usage (inside the batcher):
//   ExampleTransform t{channels, height, width, augment, mean, stddev};
//   if (t.IsIdentity()) memcpy(dst, src, ...);
//   else t.Apply(src, dst, AugmentKey(seed, worker, epoch, position));
//
// Thread-safety: everything here is a pure function or a const object;
// call from any thread.
#ifndef DOWNPOUR_WORKER_DATA_AUGMENT_H_
#define DOWNPOUR_WORKER_DATA_AUGMENT_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/enum_names.h"

namespace downpour {

// Train-time augmentation, applied per example in this order: random crop
// with zero padding, horizontal flip (then BatcherOptions' normalization).
// Off by default.
struct AugmentOptions {
  // p > 0: pad the image with p zero pixels on every side and take an HxW
  // crop at a uniformly random offset in [0, 2p] x [0, 2p], as torchvision's
  // RandomCrop(size, padding=p) does. 0 = off.
  int random_crop_padding = 0;
  // Mirror left-right with probability 1/2.
  bool horizontal_flip = false;
};

// The training-image augmentation a job asks for (--augment): none, random
// horizontal flips, or random crops (padding --augment_crop_padding) and
// flips.
enum class AugmentPolicy { kNone, kFlip, kCropFlip };

inline constexpr EnumName<AugmentPolicy> kAugmentPolicyNames[] = {
    {AugmentPolicy::kNone, "none"},
    {AugmentPolicy::kFlip, "flip"},
    {AugmentPolicy::kCropFlip, "crop_flip"},
};

inline const char* AugmentPolicyName(AugmentPolicy a) {
  return EnumNameOf(kAugmentPolicyNames, a);
}

// The AugmentOptions of `policy`, cropping with `crop_padding` pixels.
inline AugmentOptions AugmentFor(AugmentPolicy policy, int crop_padding) {
  AugmentOptions o;
  o.horizontal_flip = policy != AugmentPolicy::kNone;
  if (policy == AugmentPolicy::kCropFlip) o.random_crop_padding = crop_padding;
  return o;
}

// AugmentPolicy as a flag type.
inline bool AbslParseFlag(absl::string_view text, AugmentPolicy* a,
                          std::string* error) {
  return ParseEnumFlag(kAugmentPolicyNames, text, a, error);
}
inline std::string AbslUnparseFlag(AugmentPolicy a) {
  return AugmentPolicyName(a);
}

// Largest accepted AugmentOptions::random_crop_padding.
inline constexpr int kMaxCropPadding = 1 << 16;

namespace data_internal {

// The SplitMix64 finalizer: a bijective 64-bit mix.
uint64_t SplitMix64(uint64_t x);

// A uniform integer in [0, bound), bound >= 1, from raw mt19937_64 output by
// rejection (Lemire's threshold), so results are the same on every platform
// and standard library.
uint64_t UniformBelow(std::mt19937_64& gen, uint64_t bound);

// The seed of the augmentation draws for the example at `position` of epoch
// `epoch`'s order on worker `worker_index`.
uint64_t AugmentKey(uint64_t seed, int worker_index, int epoch,
                    size_t position);

// Crop with zero padding, flip, normalize one C x H x W example.
struct ExampleTransform {
  int channels = 1, height = 0, width = 0;
  AugmentOptions augment;
  // Per channel, both empty (off) or both of size `channels`.
  std::vector<float> normalize_mean, normalize_std;

  // True when Apply would copy the example unchanged.
  bool IsIdentity() const {
    return augment.random_crop_padding == 0 && !augment.horizontal_flip &&
           normalize_mean.empty();
  }
  // dst(c, y, x) = padded(c, y + dy, x' + dx) with x' = W-1-x when flipped
  // (else x) and (dy, dx) the crop offset drawn from `key`, then normalized.
  void Apply(const float* src, float* dst, uint64_t key) const;
};

}  // namespace data_internal
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_AUGMENT_H_

