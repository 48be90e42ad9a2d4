// File: worker/data/image_encode.h
//
// Writing data sets in the formats the readers take: PNG (libpng's
// simplified png_image API) and JPEG (libjpeg-turbo) images, and
// safetensors files of arbitrary dtype, as NumPy's
// `safetensors.numpy.save_file` writes them. The converter
// (deploy/convert_dataset_main.cc) and the tests use them.
//
//   DP_ASSIGN_OR_RETURN(std::string png, EncodePng(pixels, 28, 28, 1));
//   DP_RETURN_IF_ERROR(WriteWholeFile(dir + "/train/3/0.png", png));
//
// Thread-safety: the functions keep no state.
#ifndef DOWNPOUR_WORKER_DATA_IMAGE_ENCODE_H_
#define DOWNPOUR_WORKER_DATA_IMAGE_ENCODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace downpour {

// `pixels`: height * width * channels bytes, interleaved; channels 1 or 3.
absl::StatusOr<std::string> EncodePng(const uint8_t* pixels, int width,
                                      int height, int channels);
absl::StatusOr<std::string> EncodeJpeg(const uint8_t* pixels, int width,
                                       int height, int channels, int quality);

// One tensor of a safetensors file: dtype as the format spells it ("U8",
// "I32", "I64", "F32", ...), its raw little-endian bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The whole file: the header (data_offsets in the given order, padded with
// spaces to a multiple of 8) and the data.
std::string SafetensorsBytes(const std::vector<RawTensor>& tensors);

// Writes `bytes` to `path`, creating missing parent directories.
absl::Status WriteWholeFile(const std::string& path, const std::string& bytes);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_IMAGE_ENCODE_H_
