// libFuzzer target: the image decoders (worker/data/image_decode.h) and the
// tensor-file reader (worker/data/tensor_file_reader.h) over arbitrary
// bytes. The first byte picks the reader and the target shape (1 or 3
// channels, 1-32 pixels a side, resizing or not); the rest is the file.
// Hostile headers, truncations and absurd sizes must come back as errors:
// no crash, no allocation beyond kMaxImagePixels.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "worker/data/image_decode.h"
#include "worker/data/tensor_file_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Byte();
  const uint8_t side = in.Byte();
  ImageShape shape;
  shape.channels = (which & 2) ? 3 : 1;
  shape.height = 1 + side % 32;
  shape.width = 1 + (side / 32) * 4;
  const std::string rest = in.Rest();
  std::vector<float> out(static_cast<size_t>(shape.Size()));
  if (which & 1) {
    TensorFileOptions o;
    o.shape = shape;
    o.num_classes = 1 + which / 16;
    absl::StatusOr<std::unique_ptr<ExampleSource>> src =
        OpenTensorFile(fuzz::WriteScratchFile("data.safetensors", rest), o);
    if (!src.ok()) return 0;
    for (int64_t i = 0; i < (*src)->size(); ++i) {
      int32_t label = -1;
      if (!(*src)->Read(i, out.data(), &label).ok() || label < 0 ||
          label >= o.num_classes) {
        __builtin_trap();  // Read must not fail once open.
      }
    }
    return 0;
  }
  DecodedImage img;
  if (!DecodeImage(rest, "fuzz", &img).ok()) return 0;
  if (img.pixels.size() != static_cast<size_t>(img.width) * img.height *
                               img.channels ||
      int64_t{img.width} * img.height > kMaxImagePixels) {
    __builtin_trap();
  }
  std::vector<float> scratch;
  const ImageResize resize =
      (which & 4) ? ImageResize::kNone : ImageResize::kBilinear;
  (void)ImageToInput(img, shape, resize, "fuzz", &scratch, out.data());
  return 0;
}
