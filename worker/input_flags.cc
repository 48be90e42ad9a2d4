#include "worker/input_flags.h"

#include <cmath>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flag_args.h"

ABSL_FLAG(std::string, normalize_mean,
          absl::StrJoin(downpour::InputOptions{}.normalize_mean, ","),
          "Per-channel mean subtracted from the input in [0, 1] after "
          "augmentation: one number for every channel, or one per channel, "
          "comma-separated. Empty: the data set's own (CIFAR-10's channel "
          "statistics for cifar10, none otherwise). Needs --normalize_std.");
ABSL_FLAG(std::string, normalize_std,
          absl::StrJoin(downpour::InputOptions{}.normalize_std, ","),
          "Per-channel standard deviation the input is divided by, as "
          "--normalize_mean.");
ABSL_FLAG(downpour::ImageResize, image_resize,
          downpour::InputOptions{}.image_resize,
          "--dataset=image_folder: an image of another size than the "
          "model's input is resized (bilinear), or with none is an error "
          "naming the file.");
ABSL_FLAG(bool, skip_bad_images, downpour::InputOptions{}.skip_bad_images,
          "--dataset=image_folder: skip a corrupt or unreadable image and "
          "count it (bad_images in the DONE line and the SUMMARY) instead "
          "of stopping the worker with an error naming the file.");

namespace downpour {
namespace {

absl::StatusOr<std::vector<float>> ParseFloats(const char* flag,
                                               const std::string& text) {
  std::vector<float> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    float v;
    if (!absl::SimpleAtof(part, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " must be comma-separated finite numbers, got '", text,
          "'"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

absl::StatusOr<InputOptions> InputOptionsFromFlags() {
  InputOptions o;
  absl::StatusOr<std::vector<float>> mean =
      ParseFloats("normalize_mean", absl::GetFlag(FLAGS_normalize_mean));
  if (!mean.ok()) return mean.status();
  absl::StatusOr<std::vector<float>> std_dev =
      ParseFloats("normalize_std", absl::GetFlag(FLAGS_normalize_std));
  if (!std_dev.ok()) return std_dev.status();
  if (mean->size() != std_dev->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--normalize_mean and --normalize_std must have as many values, got ",
        mean->size(), " and ", std_dev->size()));
  }
  for (float s : *std_dev) {
    if (!(s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--normalize_std values must be > 0, got ", s));
    }
  }
  o.normalize_mean = *std::move(mean);
  o.normalize_std = *std::move(std_dev);
  o.image_resize = absl::GetFlag(FLAGS_image_resize);
  o.skip_bad_images = absl::GetFlag(FLAGS_skip_bad_images);
  return o;
}

std::vector<std::string> GivenInputFlagArgs() {
  return GivenFlagArgs(
      {"normalize_mean", "normalize_std", "image_resize", "skip_bad_images"});
}

}  // namespace downpour
