// File: worker/data/input_options.h
//
// How a worker turns files into model input, beyond the data set's own
// format: the per-channel normalization, what to do with an image of
// another size, and whether a corrupt image stops the worker. ps_worker
// fills it from worker/input_flags.h; its defaults are those flags'
// defaults.
#ifndef DOWNPOUR_WORKER_DATA_INPUT_OPTIONS_H_
#define DOWNPOUR_WORKER_DATA_INPUT_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/enum_names.h"

namespace downpour {

// An image whose size differs from the model's input: resized bilinearly,
// or an error naming the file.
enum class ImageResize { kBilinear, kNone };

inline constexpr EnumName<ImageResize> kImageResizeNames[] = {
    {ImageResize::kBilinear, "bilinear"},
    {ImageResize::kNone, "none"},
};

inline bool AbslParseFlag(absl::string_view text, ImageResize* r,
                          std::string* error) {
  return ParseEnumFlag(kImageResizeNames, text, r, error);
}
inline std::string AbslUnparseFlag(ImageResize r) {
  return EnumNameOf(kImageResizeNames, r);
}

struct InputOptions {
  // Per-channel x -> (x - mean[c]) / std[c] after augmentation; both empty
  // for the data set's default (CIFAR-10's channel statistics for cifar10,
  // none otherwise), else one value each, used for every channel, or one
  // per channel.
  std::vector<float> normalize_mean;
  std::vector<float> normalize_std;
  ImageResize image_resize = ImageResize::kBilinear;
  // A corrupt or unreadable image is skipped and counted (the DONE line's
  // bad_images) instead of stopping the worker.
  bool skip_bad_images = false;
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_INPUT_OPTIONS_H_
