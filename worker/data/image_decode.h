// File: worker/data/image_decode.h
//
// PNG and JPEG files to model input: decoding through libpng (its simplified
// png_image API) and libjpeg-turbo (jpeglib.h), the channel conversions of
// PIL's Image.convert, and a bilinear resize; then the NCHW floats in [0, 1]
// that every reader of worker/data produces.
//
//   DecodedImage img;
//   DP_RETURN_IF_ERROR(DecodeImage(bytes, "a/b.png", &img));
//   DP_RETURN_IF_ERROR(ImageToInput(img, target, ImageResize::kBilinear,
//                                   "a/b.png", &scratch, dst));
//
// Errors are Status values naming the file, never a longjmp or an abort:
// DataLoss for a corrupt or truncated file or one that is neither PNG nor
// JPEG; ResourceExhausted for an image above kMaxImagePixels (checked from
// the header, before anything of that size is allocated); InvalidArgument
// for a size mismatch under ImageResize::kNone.
//
// Thread-safety: the functions keep no state; call them from any thread.
#ifndef DOWNPOUR_WORKER_DATA_IMAGE_DECODE_H_
#define DOWNPOUR_WORKER_DATA_IMAGE_DECODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/data/example_source.h"
#include "worker/data/input_options.h"

namespace downpour {

// The largest image (width * height) the decoders accept: 16 Mpixel, a
// 4096 x 4096 image or a 12-Mpixel photograph.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 24;

// 8-bit pixels, interleaved (HWC), 1 (gray) or 3 (RGB) channels.
struct DecodedImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
};

// Decodes a PNG or JPEG file (by its signature, not its name) held in
// `bytes` into *out, reusing out->pixels' memory. Gray and gray+alpha come
// out as 1 channel; everything else as RGB (alpha is dropped, palette
// expanded, 16-bit reduced to 8). `name` is only for the messages.
absl::Status DecodeImage(absl::string_view bytes, const std::string& name,
                         DecodedImage* out);

// The image as `target.channels` x target.height x target.width floats
// x / 255 in [0, 1], written to `dst`: gray to RGB copies the gray value
// into each channel and RGB to gray is PIL's "L" (R * 299/1000 + G *
// 587/1000 + B * 114/1000, rounded), both as Image.convert does; a size
// other than the target's is resized bilinearly as PIL's Image.resize does
// (triangle filter widened when shrinking) unless `resize` is kNone, which
// makes it InvalidArgument naming `name`. `scratch` is reused memory.
absl::Status ImageToInput(const DecodedImage& img, const ImageShape& target,
                          ImageResize resize, const std::string& name,
                          std::vector<float>* scratch, float* dst);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_IMAGE_DECODE_H_
